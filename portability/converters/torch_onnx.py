"""ONNX from a ``torch.export`` program: ``OnnxFromTorch`` by ``torch.onnx.export(dynamo=True)`` (the
exporter PyTorch recommends; one file: ``external_data=False``) and ``OnnxFromTorchScript`` by the
TorchScript-based exporter (``dynamo=False``; deprecated upstream, taken only when asked for with
``--via OnnxFromTorchScript``). Inputs and outputs get the source's names. The program is opened through
``portability.sources.torch_export`` (vetted: nothing is unpickled).

Options: ``opset`` (default 18); ``dynamic`` (``OnnxFromTorchScript``: the program's dynamic dims declared
dynamic in the graph, ``dynamic_axes``, as a decoder's cache that grows needs; ``check --generate`` sets it).
The tracer runs the program at the check's shapes: every size the program reads from a shape becomes a
constant of the graph at its traced value (a position offset read from the past's length, say), whatever
the graph then declares; the dynamo exporter keeps them symbolic."""
from __future__ import annotations

import re

from pathlib import Path
from typing import Any

import numpy as np

from portability.converters.base import ConvertContext, Converter, package_version, require
from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import BadModel, ConvertError

OPSET = 18


def _example(ctx: ConvertContext) -> tuple:
    import torch

    args = []
    for t in ctx.signature["inputs"]:
        shape = (ctx.input_shapes or {}).get(t["name"]) or [d or 1 for d in t["shape"]]
        args.append(torch.from_numpy(np.zeros(shape, dtype=t["dtype"])))
    return tuple(args)


def _open(src: Artifact):
    from portability.sources.torch_export import open_program

    try:
        return open_program(src.path)
    except BadModel as e:
        raise ConvertError(str(e)) from None


def _message(e: Exception) -> str:
    """The exporter's failure in one line: its cause and the graph node it was executing where it says them
    (torch.onnx wraps them under its own advice: "Failed to decompose the FX graph … Next steps …")."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    cause = next((f"{m.group(1)}: {m.group(2)}" for ln in lines if (m := re.match(r"<class '(?:\w+\.)*(\w+)'>: (.+)", ln))), None)
    node = next((m.group(0) for ln in lines if (m := re.search(r"While executing %\S+ .*?target=torch\.ops\.[\w.]+", ln))), None)
    if cause:
        head = lines[0].split(". ")[0]
        return f"{type(e).__name__}: {head}: {cause}" + (f" ({node})" if node else "")
    return f"{type(e).__name__}: " + " | ".join(lines[:4])[:500]


def _op(message: str) -> str | None:
    """The aten op of the node the exporter failed at (``view`` of ``torch.ops.aten.view.default``)."""
    m = re.search(r"target=torch\.ops\.aten\.(\w+)", message)
    return m.group(1) if m else None


def _Eval(module, example: tuple):
    """The program's module for the TorchScript tracer, which calls ``train(False)``: an exported
    program's module refuses ``train()``, so it is held without being registered as a submodule. Its inputs
    are checked against the program's constraints once, on ``example``, outside the tracer: a program read
    without its guards code (``open_program``) checks them on its symbolic sizes, which recurse under it."""
    import torch

    with torch.no_grad():
        module(*example)
    module.validate_inputs = False

    class Eval(torch.nn.Module):
        def forward(self, *args):
            return self._program(*args)

    for t in list(module.parameters()) + list(module.buffers()):
        t.requires_grad_(False)  # traced as constants of the graph
    m = Eval()
    object.__setattr__(m, "_program", module)
    return m


def _dynamic_axes(sig: dict) -> dict[str, dict[int, str]]:
    """The signature's dynamic dims (None), named for ``dynamic_axes``: each tensor's own."""
    return {t["name"]: {i: f"{t['name']}_{i}" for i, d in enumerate(t["shape"]) if d is None}
            for t in sig["inputs"] + sig["outputs"] if None in t["shape"]}


class _TorchToOnnx(Converter):
    input_format = "torch"
    output_format = "onnx"
    uses = ("torch", "onnxscript")
    requires = {"torch": install("torch"), "onnxscript": install("torch")}
    pool = "torch"  # it imports PyTorch: its worker forks from the pool that imported it
    uses_shapes = True
    dynamo: bool

    def version(self) -> str:
        return f"2+torch{package_version('torch')}+onnxscript{package_version('onnxscript')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        require(self.requires, "to export a PyTorch model")
        import torch

        from portability.converters.onnx_names import rename_io

        ep = _open(src)
        out = out_dir / "model.onnx"
        opset = int(options.get("opset", OPSET))
        names = dict(input_names=[t["name"] for t in ctx.signature["inputs"]],
                     output_names=[t["name"] for t in ctx.signature["outputs"]])
        try:
            if self.dynamo:  # its own names: the source's may be those of inner values too (renamed below)
                torch.onnx.export(ep, _example(ctx), str(out), dynamo=True, external_data=False, opset_version=opset)
            else:
                dyn = _dynamic_axes(ctx.signature) if options.get("dynamic") else None
                torch.onnx.export(_Eval(ep.module(), _example(ctx)), _example(ctx), str(out), dynamo=False,
                                  opset_version=opset, dynamic_axes=dyn or None, **names)
        except Exception as e:
            msg = _message(e)
            raise ConvertError(f"torch.onnx.export (dynamo={self.dynamo}) failed: {msg}", op=_op(msg)) from None
        if not out.is_file():
            raise ConvertError("torch.onnx.export wrote no file")
        renamed = rename_io(out, ctx.signature)
        return Artifact(path=out, format="onnx", sha256="", meta={
            "onnx_signature": ctx.signature, "produced_by": f"torch.onnx.export(dynamo={self.dynamo}) torch {torch.__version__}, opset {opset}",
            **({"renamed": renamed} if renamed else {})})


class OnnxFromTorch(_TorchToOnnx):
    dynamo = True


class OnnxFromTorchScript(_TorchToOnnx):
    dynamo = False
    cost = 5
    #: a decoder's cache grows a step at a time: its dims declared dynamic (the traced sizes stay constants)
    generation_options = {"dynamic": True}
