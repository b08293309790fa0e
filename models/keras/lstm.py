"""LSTM text classifier: embedding → LSTM (last hidden state) → dense — Keras 3."""
from __future__ import annotations

from models.keras.layers import lstm_classifier


def build(arch_spec: dict, classes: int, **kw):
    return lstm_classifier(arch_spec, classes, **kw)
