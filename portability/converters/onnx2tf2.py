"""TfliteFromOnnx2: onnx2tf 2.x's direct backend (``flatbuffer_direct``: it writes the ``.tflite`` itself, no
SavedModel, no TensorFlow converter), a second ONNX -> TFLite converter beside the pinned 1.x route.

Taken only when asked for (``--via TfliteFromOnnx2``): the default route stays onnx2tf 1.x's SavedModel and
TensorFlow's converter, so the two converters cross-check each other on the same targets. Its float32 file
only (2.x's float16 file is float16 end to end, inputs included, which LiteRT's CPU kernels refuse).

onnx2tf 2.x and 1.x share a module name, and 2.x declares Python >= 3.12 (it runs on 3.11 with this stack):
it lives in a package folder of its own (``core.dirs.tools_root``; ``portability setup onnx2tf2``), put first on the
converter's ``PYTHONPATH``; its own pins (older numpy, onnx, onnxruntime…) are not installed.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from portability.converters.base import ConvertContext, Converter, package_version, run_tool
from portability.core.artifact import Artifact
from portability.converters.tools import Tool
from portability.core.errors import ConvertError

VERSION = "2.6.9"
TOOL = Tool("onnx2tf2", "onnx2tf", VERSION, "site/onnx2tf")


def site() -> Path:
    return TOOL.folder / "site"


def status() -> tuple[bool, str]:
    return TOOL.status()


def provision(log: Callable[[str], None] = print) -> Path:
    """Install onnx2tf 2.x (the package alone, no dependencies) into its folder; idempotent, about a second."""
    return TOOL.provision(lambda d: [[sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--ignore-requires-python",
                                      "--no-compile", "--target", str(d / "site"), f"onnx2tf=={VERSION}"]], log)


class TfliteFromOnnx2(Converter):
    input_format = "onnx"
    output_format = "tflite"
    pool = "tensorflow"  # it imports TensorFlow: its worker forks from the pool that imported it
    variants = {"quant": ("fp32",)}
    uses_shapes = True
    on_request = True  # a second converter, taken only with --via TfliteFromOnnx2
    cost = 3

    def version(self) -> str:
        return f"2+onnx2tf{VERSION}+litert{package_version('ai-edge-litert')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from portability.converters.onnx2tf import failed
        from portability.converters.onnx2tf_run import MODULE
        from portability.converters.onnx2tf_log import meaningful_lines
        from portability.converters.shapes import fix_input_shapes, onnx2tf_args
        from portability.converters.tflite_layout import describe_tflite
        from portability.core.model import read_signature

        if not status()[0]:
            raise TOOL.unavailable()
        shapes = self.shapes_used(ctx)
        with tempfile.TemporaryDirectory(prefix="portability-onnx2tf2-") as scratch:
            work = Path(scratch)
            model = work / "model.onnx"
            if shapes:
                try:
                    fix_input_shapes(src.path, model, shapes)
                except Exception as e:  # noqa: BLE001 — as the 1.x route says it
                    raise ConvertError(f"fixing the input shapes {shapes} failed: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
            else:
                shutil.copyfile(src.path, model)  # onnx2tf rewrites its input in place
            kept = work / "source.onnx"
            shutil.copyfile(model, kept)
            sig = read_signature(kept) if shapes or not ctx.signature else ctx.signature
            # 2.x's command line (its site first on the path), its onnxsim passes served by one process as 1.x's are
            cmd = [sys.executable, "-m", MODULE, "-i", "model.onnx", "-o", str(work / "out"), *onnx2tf_args(shapes)]
            path = os.pathsep.join([str(site())] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
            p = run_tool(cmd, f"onnx2tf {VERSION}", ctx.timeout_s, cwd=work, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=path,
                         PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
            tflite = work / "out" / "model_float32.tflite"
            if p.returncode != 0 or not tflite.is_file():
                raise failed(p, kept, f"onnx2tf {VERSION}")
            out = out_dir / "model.tflite"
            shutil.move(str(tflite), str(out))
            io = describe_tflite(out, sig, onnx_path=kept)
        warnings = [ln.strip() for ln in meaningful_lines(p.stdout, 6) if "WARN" in ln]
        return Artifact(path=out, format="tflite", sha256="", meta={
            "onnx_signature": sig, "tflite_io": io, "quant": "fp32", "converter_warnings": warnings,
            "produced_by": f"onnx2tf {VERSION} (flatbuffer_direct)", **({"input_shapes": shapes} if shapes else {})})


__all__ = ["TfliteFromOnnx2", "provision", "status", "VERSION"]
