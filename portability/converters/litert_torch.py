"""TfliteFromTorch: litert-torch (formerly ai-edge-torch) converts a ``torch.export`` program straight to
``.tflite``: PyTorch's native route to LiteRT, without ONNX and onnx2tf. A PyTorch source's float32 TFLite
targets take it; ``--via onnx`` takes the ONNX route (torch.onnx, onnx2tf) instead, for comparison.

litert-torch brings some thirty packages of its own (JAX, transformers, an older typing-extensions…), so it
lives in a virtual environment of its own (``core.dirs.tools_root``; ``portability setup litert-torch``) that sees this
one's packages (torch, TensorFlow, numpy stay the pinned ones). The conversion runs there as
``python -m portability.converters.litert_torch PROGRAM OUT SHAPES``: the program is opened vetted
(``sources/torch_export``: nothing is unpickled), its module converted at the check's input shapes; the
``.tflite`` keeps the program's layout (NCHW stays NCHW).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from portability.converters.base import ConvertContext, Converter, package_version, run_tool
from portability.core.artifact import Artifact
from portability.converters.tools import Tool
from portability.core.errors import ConvertError

VERSION = "0.10.0"
TOOL = Tool("litert-torch", "litert-torch", VERSION, "bin/python")


def python() -> Path:
    return TOOL.folder / "bin" / "python"


def status() -> tuple[bool, str]:
    return TOOL.status()


def provision(log: Callable[[str], None] = print) -> Path:
    """A virtual environment seeing this one's packages, with litert-torch and its own dependencies installed
    over them (torch, TensorFlow, numpy and LiteRT held at this environment's versions); idempotent, about half
    a minute."""
    def commands(d: Path) -> list[list[str]]:
        pins = d.parent / f"litert-torch-{VERSION}.constraints"
        pins.write_text("".join(f"{p}=={package_version(p)}\n" for p in ("torch", "tensorflow-cpu", "numpy", "ai-edge-litert")))
        return [[sys.executable, "-m", "venv", "--system-site-packages", str(d)],
                [str(d / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(pins), f"litert-torch=={VERSION}"]]

    return TOOL.provision(commands, log)


class TfliteFromTorch(Converter):
    input_format = "torch"
    output_format = "tflite"
    variants = {"quant": ("fp32",)}
    uses_shapes = True
    uses = ("litert-torch",)

    def version(self) -> str:
        return f"1+litert-torch{VERSION}+torch{package_version('torch')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from portability.converters.tflite_layout import describe_tflite

        if not status()[0]:
            raise TOOL.unavailable()
        sig = ctx.signature or {}
        shapes = {t["name"]: (ctx.input_shapes or {}).get(t["name"]) or [d or 1 for d in t["shape"]] for t in sig.get("inputs", [])}
        spec = json.dumps({"inputs": [[t["name"], shapes[t["name"]], t["dtype"]] for t in sig.get("inputs", [])]})
        out = out_dir / "model.tflite"
        p = run_tool([str(python()), "-m", "portability.converters.litert_torch", str(src.path), str(out), spec],
                     "litert-torch", ctx.timeout_s, TF_CPP_MIN_LOG_LEVEL="2")
        if p.returncode != 0 or not out.is_file():
            lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
            errs = [ln for ln in lines if ln.startswith("error:")] or [ln for ln in lines if "Error" in ln] or lines[-1:]
            raise ConvertError(f"litert-torch failed (exit {p.returncode}): " + (errs[-1] if errs else "no output")[:500])
        io = describe_tflite(out, sig, native=True)
        return Artifact(path=out, format="tflite", sha256="", meta={
            "onnx_signature": sig, "tflite_io": io, "quant": "fp32", "produced_by": f"litert-torch {VERSION} (torch.export program)",
            **({"input_shapes": ctx.input_shapes} if ctx.input_shapes else {})})


def _main(program: str, out: str, spec: str) -> int:
    """In litert-torch's environment: the vetted program's module, converted at the given input shapes."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import torch

    from portability.core.errors import BadModel
    from portability.sources.torch_export import open_program

    try:
        module = open_program(Path(program)).module()
    except BadModel as e:
        print(f"error: {e}")
        return 1
    args = tuple(torch.from_numpy(np.zeros(shape, dtype=dtype)) for _, shape, dtype in json.loads(spec)["inputs"])
    import litert_torch

    try:
        litert_torch.convert(module, args).export(out)
    except Exception as e:  # noqa: BLE001 — the converter's message, in one line
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        print(f"error: {type(e).__name__}: " + " | ".join(lines[:3])[:500])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(*sys.argv[1:4]))
