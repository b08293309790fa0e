"""SavedModelFromKeras: a Keras 3 model -> a SavedModel by Keras's own ``model.export`` (the native route to
TFLite, TF.js and, through tf2onnx, ONNX). The model is loaded with ``safe_mode=True``.

A model with dynamic input dims (a ``None`` batch) is exported at the check's static shapes
(``ctx.input_shapes``), as onnx2tf's route is: web runtimes (LiteRT.js, ORT's WebGL) cannot resize."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version, require
from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import BadModel, ConvertError


class SavedModelFromKeras(Converter):
    input_format = "keras"
    output_format = "saved_model"
    pool = "tensorflow"  # it imports TensorFlow: its worker forks from the pool that imported it
    uses = ("keras",)
    requires = {"keras": install("tensorflow"), "tensorflow": install("tensorflow")}
    uses_shapes = True

    def version(self) -> str:
        return f"1+keras{package_version('keras')}+tf{package_version('tensorflow-cpu')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        require(self.requires, "to export a Keras model")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        from portability.converters.savedmodel_io import savedmodel_io
        from portability.sources.keras import open_model

        try:
            model = open_model(src.path)
        except BadModel as e:
            raise ConvertError(str(e)) from None
        shapes = self.shapes_used(ctx) or {}
        try:
            kw = {"input_signature": _signature(ctx.signature, shapes)} if shapes else {}
            model.export(str(out_dir / "sm"), format="tf_saved_model", verbose=False, **kw)
        except Exception as e:
            raise ConvertError(f"keras model.export failed: {' '.join(str(e).split())[:400]}") from None
        for f in (out_dir / "sm").iterdir():
            f.rename(out_dir / f.name)
        (out_dir / "sm").rmdir()
        return Artifact(path=out_dir / "saved_model.pb", format="saved_model", sha256="", meta={
            "onnx_signature": ctx.signature, "tflite_io": savedmodel_io(out_dir, ctx.signature),
            "produced_by": "keras model.export", **({"input_shapes": shapes} if shapes else {})})


def _signature(sig: dict, shapes: dict[str, list[int]]) -> list:
    import tensorflow as tf

    specs = [tf.TensorSpec(shapes.get(t["name"]) or t["shape"], t["dtype"], name=t["name"]) for t in sig["inputs"]]
    return specs if len(specs) > 1 else specs
