"""MXNet checkpoints: their snapshot, and MXNet's own ONNX exporter (``mx.onnx.export_model``) run in
MXNet's environment (``core/mxnet_env.py``) by ``sources/mxnet_tool.py``."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter
from portability.core.artifact import Artifact
from portability.core.errors import ConvertError

#: the opset MXNet 1.9's exporter has translations for (it would stamp the installed onnx's newest)
OPSET = 13


def _mxnet_version() -> str:
    from portability.core import mxnet_env

    ok, why = mxnet_env.status()
    return why.split("ready: ", 1)[-1] if ok else "absent"


class MxnetFromMxnet(Converter):
    """The checkpoint copied into the cache as ``model-symbol.json`` + ``model-0000.params``."""

    input_format = output_format = "mxnet"
    snapshot = True

    def version(self) -> str:
        return "1"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from portability.sources.mxnet import pair

        symbol, params = pair(src.path)
        shutil.copyfile(symbol, out_dir / "model-symbol.json")
        shutil.copyfile(params, out_dir / "model-0000.params")
        return Artifact(path=out_dir / "model-symbol.json", format="mxnet", sha256="",
                        meta={"onnx_signature": ctx.signature or {}})


class OnnxFromMxnet(Converter):
    """MXNet's ONNX exporter, dynamic batch, opset 13; the outputs named as the symbol names them."""

    input_format = "mxnet"
    output_format = "onnx"
    uses_shapes = True
    cost = 3

    def version(self) -> str:
        return f"mx2onnx ({_mxnet_version()}) opset {OPSET}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from portability.sources.mxnet import pair, tool

        symbol, params = pair(src.path)
        sig = ctx.signature or {}
        shapes = {i["name"]: [1 if d is None else int(d) for d in i["shape"]] for i in sig.get("inputs", [])}
        shapes.update({k: list(v) for k, v in (ctx.input_shapes or {}).items()})
        out = out_dir / "model.onnx"
        answer = tool("export", str(symbol), str(params), json.dumps(shapes), str(out), str(OPSET),
                      timeout_s=ctx.timeout_s or 600)
        if "error" in answer or not out.is_file():
            raise ConvertError(f"MXNet's ONNX exporter failed: {answer.get('error', 'no model written')}")
        return Artifact(path=out, format="onnx", sha256="", meta={"onnx_signature": sig, "opset": OPSET})
