"""LeNet-5 (LeCun et al. 1998): conv 6@5×5 (same) → pool → conv 16@5×5 → pool → 120 → 84 → classes — Keras 3."""
from __future__ import annotations

from models.keras.layers import conv_net


def build(arch_spec: dict, classes: int, **kw):
    return conv_net(arch_spec, classes, name="lenet5", **kw)
