"""ResNet-20 (He et al. 2016, CIFAR variant) on 1-channel 28×28 images — Keras 3."""
from __future__ import annotations

from models.keras.layers import resnet


def build(arch_spec: dict, classes: int, **kw):
    return resnet(arch_spec, classes, name="resnet20", **kw)
