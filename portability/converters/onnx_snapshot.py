"""OnnxFromOnnx: a self-contained snapshot of the source model in the cache.

Every target starts from this copy, so later steps never touch the user's files (onnx2tf rewrites its
input in place) and a run is immune to the model changing on disk mid-check. External data is folded
into the single ``.onnx`` file (what a browser fetches, what onnx2tf wants); a model over protobuf's
2 GB limit keeps its external data files, copied alongside (targets that need one file then fail to
load it, which is the honest answer for such a model).
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version
from portability.core.artifact import Artifact

#: the first step of every target's chain
SNAPSHOT = ("portability.converters.onnx_snapshot:OnnxFromOnnx", {})

_TWO_GB = 2**31 - 1


class OnnxFromOnnx(Converter):
    output_format = "onnx"
    uses = ("onnx",)
    snapshot = True

    def version(self) -> str:
        return "2+onnx" + package_version("onnx")

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from portability.core.model import external_data_files

        out = out_dir / "model.onnx"
        externals = external_data_files(src.path)
        total = src.path.stat().st_size + sum(p.stat().st_size for p in externals)
        if not externals:
            shutil.copyfile(src.path, out)
        elif total < _TWO_GB:
            import onnx

            model = onnx.load(str(src.path), load_external_data=True)
            onnx.save_model(model, str(out), save_as_external_data=False)
        else:
            shutil.copyfile(src.path, out)
            for p in externals:
                rel = p.relative_to(src.path.parent)
                (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, out_dir / rel)
        return Artifact(path=out, format="onnx", sha256="", meta={"inlined": bool(externals) and total < _TWO_GB})
