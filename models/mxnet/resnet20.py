"""ResNet-20 (CIFAR variant) on 1-channel 28×28 images — MXNet Gluon."""
from __future__ import annotations

from models.mxnet.layers import ResNet


def build(arch_spec: dict, classes: int, **kw) -> ResNet:
    return ResNet(arch_spec, classes, **kw)
