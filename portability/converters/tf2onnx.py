"""OnnxFromSavedModel: a SavedModel -> ONNX by tf2onnx (``python -m tf2onnx.convert --saved-model``; its
``from_keras`` is broken on Keras 3, the SavedModel path is not). Runs in a subprocess, offline; the
graph's inputs and outputs are then given the source's names. The layout stays the source's (no
``--inputs-as-nchw``): a Keras model's ONNX takes channels-last images, as the Keras model does.

Options: ``opset`` (default 17)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version, run_tool, require
from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import ConvertError

OPSET = 17


def _failure(log: str, limit: int = 6) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.startswith(("I0000", "W0000", "WARNING: All log"))]
    picked = [ln for ln in lines if "Error" in ln or "error" in ln or "Unsupported" in ln or "not supported" in ln]
    return " | ".join((picked or lines)[-limit:])


class OnnxFromSavedModel(Converter):
    input_format = "saved_model"
    output_format = "onnx"
    pool = "tensorflow"  # it imports TensorFlow: its worker forks from the pool that imported it
    uses = ("tf2onnx",)
    requires = {"tf2onnx": install("tensorflow"), "tensorflow": install("tensorflow")}

    def version(self) -> str:
        return f"1+tf2onnx{package_version('tf2onnx')}+tf{package_version('tensorflow-cpu')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        require(self.requires, "to convert a SavedModel to ONNX")
        from portability.converters.onnx_names import rename_io
        from portability.core.model import read_signature

        out = out_dir / "model.onnx"
        opset = int(options.get("opset", OPSET))
        cmd = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(src.folder), "--output", str(out),
               "--opset", str(opset), "--signature_def", "serving_default", "--tag", "serve"]
        p = run_tool(cmd, "tf2onnx", ctx.timeout_s, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")
        if p.returncode != 0 or not out.is_file():
            raise ConvertError(f"tf2onnx failed (exit {p.returncode}): {_failure(p.stdout)}")
        renamed = rename_io(out, ctx.signature or read_signature(out))
        return Artifact(path=out, format="onnx", sha256="", meta={
            "onnx_signature": ctx.signature, "produced_by": f"tf2onnx {package_version('tf2onnx')} --saved-model, opset {opset}",
            **({"renamed": renamed} if renamed else {})})
