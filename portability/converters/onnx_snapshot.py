"""OnnxFromOnnx: a self-contained snapshot of the source model in the cache.

Every target starts from this copy, so later steps never touch the user's files (onnx2tf rewrites its
input in place) and a run is immune to the model changing on disk mid-check. ``inline=True`` folds
external data into the single ``.onnx`` file (what a browser fetches, what onnx2tf wants); models over
protobuf's 2 GB limit keep their external data files, copied alongside.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version
from portability.core.artifact import Artifact
from portability.core.errors import ConvertError

_TWO_GB = 2**31 - 1


class OnnxFromOnnx(Converter):
    output_format = "onnx"

    def version(self) -> str:
        return "1+onnx" + package_version("onnx")

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from portability.core.model import external_data_files

        out = out_dir / "model.onnx"
        externals = external_data_files(src.path)
        if not externals:
            shutil.copyfile(src.path, out)
        else:
            total = src.path.stat().st_size + sum(p.stat().st_size for p in externals)
            if options.get("inline", False) and total < _TWO_GB:
                import onnx

                model = onnx.load(str(src.path), load_external_data=True)
                onnx.save_model(model, str(out), save_as_external_data=False)
            else:
                if options.get("inline", False):
                    raise ConvertError(f"model is {total / 2**30:.1f} GiB: too large for a single-file ONNX (2 GiB protobuf limit)")
                shutil.copyfile(src.path, out)
                for p in externals:
                    rel = p.relative_to(src.path.parent)
                    (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(p, out_dir / rel)
        return Artifact(path=out, format="onnx", sha256="", meta={"inlined": bool(externals) and options.get("inline", False)})
