"""TensorFlow running the SavedModel that onnx2tf makes of the ONNX model (``server/tf``).

The SavedModel's ``serving_default`` signature has the same tensors and keys as onnx2tf's fp32 ``.tflite``;
its layouts are resolved on the SavedModel itself (``artifact.meta["tflite_io"]``), and the LiteRT runtime's
mapping helpers apply: inputs go in channel-last where onnx2tf moved them, outputs come back in the ONNX
layout.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import LoadError, RunError
from portability.core.protocol import TensorLink
from portability.runtimes.base import Availability, Runtime, modules_present, output_dtypes, time_calls
from portability.runtimes.litert import from_tflite, tflite_io, to_tflite


def import_tensorflow_without_keras():
    """``import tensorflow``, less the eager import of Keras its ``__init__`` does (``keras.src.optimizers``,
    which registers Keras's optimizer classes for SavedModels that hold a Keras optimizer's state): a
    SavedModel's signatures run without them, as under TensorFlow Serving, and the import takes 2.4 s of
    CPU instead of 3.7 s. Keras still imports normally afterwards."""
    if "tensorflow" not in sys.modules and "keras.src.optimizers" not in sys.modules:
        sys.modules["keras.src.optimizers"] = None  # TensorFlow's __init__ tolerates its ImportError
        try:
            import tensorflow
        finally:
            del sys.modules["keras.src.optimizers"]
    import tensorflow as tf

    return tf


def input_keys(inputs: list[TensorLink], signature: dict[str, Any]) -> list[str]:
    """The signature key of each input: the fp32 ``.tflite``'s key, else a spelling of the ONNX name, else
    the one signature input of that rank left over (a ``.tflite`` without a signature names none)."""
    from portability.converters.tflite_layout import _sanitized

    keys: list[str | None] = []
    for e in inputs:
        hit = [k for k in ([e.key] if e.key else []) + sorted(_sanitized(e.onnx)) if k in signature]
        keys.append(hit[0] if hit else None)
    for i, e in enumerate(inputs):
        if keys[i] is None:
            left = [k for k, spec in signature.items() if k not in keys and spec.shape.rank in (None, len(e.shape))]
            if len(left) != 1 or sum(k is None for k in keys) != 1:
                raise LoadError(f"no SavedModel signature input for ONNX input '{e.onnx}' (signature inputs: {sorted(signature)})")
            keys[i] = left[0]
    return keys  # type: ignore[return-value]


class TfSavedModel(Runtime):
    cost_s = 4.0  # importing TensorFlow (where its worker pool has not)
    input_format = "saved_model"
    uses = ("tensorflow",)
    pool = "tensorflow"

    @classmethod
    def availability(cls) -> Availability:
        return modules_present("tensorflow", hint=install("tensorflow"))

    def load(self, artifact: Artifact) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        tf = import_tensorflow_without_keras()
        self._tf = tf
        self.io = tflite_io(artifact)
        try:
            self.fn = tf.saved_model.load(str(artifact.folder)).signatures["serving_default"]
        except Exception as e:
            raise LoadError(f"TensorFlow cannot load the SavedModel: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        self._in_keys = input_keys(self.io.inputs, dict(self.fn.structured_input_signature[1]))
        onnx_outputs = [t["name"] for t in artifact.meta.get("onnx_signature", {}).get("outputs", [])]
        self._dtypes = output_dtypes(artifact)
        self._out_keys = [self._output_key(e, onnx_outputs) for e in self.io.outputs]

    def _output_key(self, e: TensorLink, onnx_outputs: list[str]) -> str:
        """The signature key of one output: the ONNX name, else onnx2tf's ``output_<position>``; its
        shape must be the one the mapping expects."""
        outs = self.fn.structured_outputs
        key = e.key if e.key in outs else f"output_{onnx_outputs.index(e.onnx)}" if e.onnx in onnx_outputs else None
        if key not in outs:
            raise LoadError(f"no SavedModel output for ONNX output '{e.onnx}' (signature outputs: {sorted(outs)})")
        shape = outs[key].shape
        if shape.rank != len(e.shape) or any(d is not None and d != w for d, w in zip(shape.as_list(), e.shape)):
            raise LoadError(f"SavedModel output '{key}' has shape {shape.as_list()}, expected {list(e.shape)} for '{e.onnx}'")
        return key

    def describe(self) -> str:
        return f"tensorflow {self._tf.__version__} (SavedModel, serving_default)"

    def details(self) -> dict[str, Any]:
        return {"layout": {e.onnx: list(e.perm) for e in self.io.inputs if e.perm is not None}}

    def _args(self, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        return {k: self._tf.constant(a) for k, a in zip(self._in_keys, to_tflite(self.io, feeds))}

    def _call(self, args: dict[str, Any]) -> list[np.ndarray]:
        res = self.fn(**args)
        return [res[k].numpy() for k in self._out_keys]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return from_tflite(self.io, self._call(self._args(feeds)), self._dtypes)
        except Exception as e:
            raise RunError(f"TensorFlow failed: {_cause(e)}") from None

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        """Per call: run the signature on prepared tensors and read the outputs back to numpy."""
        return time_calls(self._call, (self._args(feeds),), warmup, runs)


def _cause(e: Exception) -> str:
    """The line of a TensorFlow error that says what went wrong ("Graph execution error:", stack traces and
    "[[{{node ...}}]]" lines say nothing), with the node it names."""
    import re

    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Graph execution error", "Detected at node", "File ", "[[", "<"))
              and not ln.endswith(":")]
    msg = (useful or lines or [type(e).__name__])[0]
    node = re.search(r"Detected at node '?([^' ]+?)'? defined at", text)
    return (msg + (f" (node {node.group(1)})" if node and node.group(1) not in msg else ""))[:300]
