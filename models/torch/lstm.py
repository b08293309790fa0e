"""LSTM text classifier: embedding → LSTM (last hidden state) → dense — PyTorch."""
from __future__ import annotations

from models.torch.layers import LSTMClassifier


def build(arch_spec: dict, classes: int, **kw) -> LSTMClassifier:
    return LSTMClassifier(arch_spec, classes, **kw)
