"""ResNet-20 (He et al. 2016, CIFAR variant) on 1-channel 28×28 images — PyTorch."""
from __future__ import annotations

from models.torch.layers import ResNet


def build(arch_spec: dict, classes: int, **kw) -> ResNet:
    return ResNet(arch_spec, classes, **kw)
