"""LeNet-1 (LeCun et al. 1989): conv 4@5×5 → pool → conv 12@5×5 → pool → dense — Keras 3."""
from __future__ import annotations

from models.keras.layers import conv_net


def build(arch_spec: dict, classes: int, **kw):
    return conv_net(arch_spec, classes, name="lenet1", **kw)
