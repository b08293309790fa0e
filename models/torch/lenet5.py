"""LeNet-5 (LeCun et al. 1998): conv 6@5×5 (same) → pool → conv 16@5×5 → pool → 120 → 84 → classes — PyTorch."""
from __future__ import annotations

from models.torch.layers import ConvNet


def build(arch_spec: dict, classes: int, **kw) -> ConvNet:
    return ConvNet(arch_spec, classes, **kw)
