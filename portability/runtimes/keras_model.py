"""Keras 3 on the ``.keras`` model itself (``server/keras``): the reference of Keras sources.

The model is loaded with ``safe_mode=True``; it is called on the feeds (``model(x, training=False)``)
with the source's own names and layout. Outputs are ``output_0``, ... in the order of ``model.outputs``
(the signature the Keras source reader gives)."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import BadModel, LoadError, RunError
from portability.runtimes.base import Availability, Runtime, modules_present, time_calls


class KerasModel(Runtime):
    input_format = "keras"
    cost_s = 4.0  # importing TensorFlow (where its worker pool has not) and Keras
    pool = "tensorflow"  # forked after TensorFlow's import: Keras's own is what is left to pay

    @classmethod
    def availability(cls) -> Availability:
        return modules_present("keras", "tensorflow", hint=install("tensorflow"))

    def load(self, artifact: Artifact) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        from portability.sources.keras import open_model

        try:
            self.model = open_model(artifact.path)
        except BadModel as e:
            raise LoadError(str(e)) from None
        import keras

        self._keras = keras
        sig = artifact.meta.get("onnx_signature") or {}
        self._in = [t["name"] for t in sig.get("inputs", [])] or [t.name for t in self.model.inputs]
        self._out = [t["name"] for t in sig.get("outputs", [])] or [f"output_{i}" for i in range(len(self.model.outputs))]

    def describe(self) -> str:
        import tensorflow as tf

        return f"keras {self._keras.__version__} (tensorflow {tf.__version__} backend)"

    def _call(self, xs: list) -> list[np.ndarray]:
        y = self.model(xs[0] if len(xs) == 1 else xs, training=False)
        ys = y if isinstance(y, (list, tuple)) else [y]
        return [np.asarray(v) for v in ys]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            ys = self._call([np.asarray(feeds[n]) for n in self._in])
        except Exception as e:
            raise RunError(f"Keras failed: {(str(e).strip().splitlines() or [type(e).__name__])[0]}") from None
        return dict(zip(self._out, ys))

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        return time_calls(self._call, ([np.asarray(feeds[n]) for n in self._in],), warmup, runs)

    def details(self) -> dict[str, Any]:
        return {"model_class": type(self.model).__name__, "safe_mode": True}
