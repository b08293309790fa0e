"""LeNet-1 (LeCun et al. 1989): conv 4@5×5 → pool → conv 12@5×5 → pool → dense — PyTorch."""
from __future__ import annotations

from models.torch.layers import ConvNet


def build(arch_spec: dict, classes: int, **kw) -> ConvNet:
    return ConvNet(arch_spec, classes, **kw)
