"""ONNX sources: the loader of ``portability.core.model`` (validation, external data confined to the
model's folder), referenced against ONNX Runtime."""
from __future__ import annotations

from portability.core.model import ModelInfo, load_model

FORMAT = "onnx"
REFERENCE = "server/ort-cpu"


def load(path) -> ModelInfo:
    return load_model(path)
