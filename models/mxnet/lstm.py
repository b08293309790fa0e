"""LSTM text classifier: embedding → LSTM (last step's output) → dense — MXNet Gluon."""
from __future__ import annotations

from models.mxnet.layers import LSTMClassifier


def build(arch_spec: dict, classes: int, **kw) -> LSTMClassifier:
    return LSTMClassifier(arch_spec, classes, **kw)
