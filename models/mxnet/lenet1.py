"""LeNet-1: conv 4@5×5 → pool → conv 12@5×5 → pool → dense — MXNet Gluon."""
from __future__ import annotations

from models.mxnet.layers import ConvNet


def build(arch_spec: dict, classes: int, **kw) -> ConvNet:
    return ConvNet(arch_spec, classes, **kw)
