"""PteFromTorch: a ``torch.export`` program lowered to an ExecuTorch program (``.pte``), PyTorch's own mobile
runtime, as ``mobile/executorch-xnnpack`` and ``mobile/executorch-portable`` run it.

Options: ``delegate``: ``xnnpack`` (``to_edge_transform_and_lower`` with the XNNPACK partitioner: what an
Android or iOS app ships; the ops it cannot take stay on the portable kernels) | ``portable`` (``to_edge``
alone: ExecuTorch's portable reference kernels, no delegate). The program is opened through
``portability.sources.torch_export`` (vetted: nothing is unpickled). ``meta["delegated"]`` lists the
delegates in the program and how many of the graph's calls each took.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version, require
from portability.converters.torch_onnx import _example, _message, _open
from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import ConvertError

DELEGATES = ("xnnpack", "portable")


class PteFromTorch(Converter):
    input_format = "torch"
    output_format = "pte"
    variants = {"delegate": DELEGATES}
    uses = ("executorch",)
    requires = {"torch": install("torch"), "executorch": install("executorch")}
    pool = "torch"  # it imports PyTorch: its worker forks from the pool that imported it
    uses_shapes = True

    def version(self) -> str:
        return f"1+executorch{package_version('executorch')}+torch{package_version('torch')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        require(self.requires, "to lower a PyTorch program to ExecuTorch")
        import torch  # before executorch: its extension links against the installed torch's libraries

        delegate = options.get("delegate", "xnnpack")
        if delegate not in DELEGATES:
            raise ConvertError(f"PteFromTorch: delegate {delegate!r} not in {'|'.join(DELEGATES)}")
        from executorch.exir import to_edge, to_edge_transform_and_lower

        ep = _open(src)
        if ctx.input_shapes:  # a program with dynamic dims: exported again at the check's static shapes
            try:
                ep = torch.export.export(ep.module(), _example(ctx))
            except Exception as e:
                raise ConvertError(f"torch.export at the check's shapes failed: {_message(e)}") from None
        try:
            if delegate == "xnnpack":
                from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

                prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
            else:
                prog = to_edge(ep).to_executorch()
        except Exception as e:
            raise ConvertError(f"ExecuTorch lowering ({delegate}) failed: {_message(e)}") from None
        out = out_dir / "model.pte"
        out.write_bytes(prog.buffer)
        plan = prog.executorch_program.execution_plan[0]
        delegated: dict[str, int] = {}
        for d in plan.delegates:
            delegated[d.id] = delegated.get(d.id, 0) + 1
        return Artifact(path=out, format="pte", sha256="", meta={
            "onnx_signature": ctx.signature, "delegate": delegate, "delegated": delegated,
            "produced_by": f"executorch {package_version('executorch')} "
                           + ("to_edge_transform_and_lower(XnnpackPartitioner)" if delegate == "xnnpack" else "to_edge (portable kernels)")})
