"""PyTorch building blocks shared by the study's architectures: the spec's initialization family and the
layer factories (images are channels-first)."""
from __future__ import annotations

import torch
from torch import nn

from models import spec


def init_(model: nn.Module) -> nn.Module:
    """The spec's initialization, in place: Glorot-uniform conv/dense kernels and LSTM input and
    recurrent kernels, zero biases (both LSTM bias vectors, forget gate included), embeddings uniform
    in ±0.05, batch norm γ=1, β=0."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LSTM):
            for name, p in m.named_parameters():
                # weight_ih [4H, in] and weight_hh [4H, H]: the same fans as Keras's [in, 4H] / [H, 4H]
                (nn.init.xavier_uniform_ if name.startswith("weight") else nn.init.zeros_)(p)
        elif isinstance(m, nn.Embedding):
            nn.init.uniform_(m.weight, -0.05, 0.05)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def act(name: str) -> nn.Module:
    return {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[name]()


def pool(kind: str) -> nn.Module:
    return {"max": nn.MaxPool2d, "avg": nn.AvgPool2d}[kind](2)


def conv(cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0, bias: bool = True) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=bias)


def bn(channels: int, a: dict) -> nn.BatchNorm2d:
    # spec momentum m updates avg = m·avg + (1-m)·batch; PyTorch's momentum is the batch's weight
    return nn.BatchNorm2d(channels, eps=a["bn_eps"], momentum=1.0 - a["bn_momentum"])


def flat_size(features: nn.Module, channels: int, shape: tuple[int, int]) -> int:
    with torch.no_grad():
        return int(features(torch.zeros(1, channels, *shape)).flatten(1).shape[1])


class ConvNet(nn.Module):
    """LeNet family: ``convs`` (conv → act → 2×2 pool each), flatten, ``dense`` hidden layers (→ act),
    the classifier."""

    def __init__(self, a: dict, classes: int, shape=(28, 28), channels: int = 1):
        super().__init__()
        feats, c = [], channels
        for out, k, p in a["convs"]:
            feats += [conv(c, out, k, padding=p), act(a["act"]), pool(a["pool"])]
            c = out
        self.features = nn.Sequential(*feats)
        head, n = [nn.Flatten()], flat_size(self.features, channels, shape)
        for width in a["dense"]:
            head += [nn.Linear(n, width), act(a["act"])]
            n = width
        head.append(nn.Linear(n, classes))
        self.head = nn.Sequential(*head)
        init_(self)

    def forward(self, x):
        return self.head(self.features(x))


class BasicBlock(nn.Module):
    """conv3×3(stride) - BN - ReLU - conv3×3 - BN, plus the shortcut (1×1 conv(stride) + BN when the
    shape changes), then ReLU. Convolutions before a BN have no bias (the BN's β is it)."""

    def __init__(self, cin: int, cout: int, stride: int, a: dict):
        super().__init__()
        self.conv1, self.bn1 = conv(cin, cout, 3, stride, 1, bias=False), bn(cout, a)
        self.conv2, self.bn2 = conv(cout, cout, 3, 1, 1, bias=False), bn(cout, a)
        self.relu = nn.ReLU()
        self.shortcut = (nn.Sequential(conv(cin, cout, 1, stride, 0, bias=False), bn(cout, a))
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, a: dict, classes: int, channels: int = 1):
        super().__init__()
        w = a["stem"]
        self.stem = nn.Sequential(conv(channels, w, 3, 1, 1, bias=False), bn(w, a), nn.ReLU())
        blocks = []
        for width, stride in a["stages"]:
            for i in range(a["blocks"]):
                blocks.append(BasicBlock(w, width, stride if i == 0 else 1, a))
                w = width
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(w, classes)
        init_(self)

    def forward(self, x):
        return self.fc(self.pool(self.blocks(self.stem(x))).flatten(1))


class LSTMClassifier(nn.Module):
    """embedding → one LSTM layer (no masking: pads are ordinary tokens) → the last step's hidden
    state → dense."""

    def __init__(self, a: dict, classes: int, vocab: int = spec.TEXT["vocab"]):
        super().__init__()
        self.embed = nn.Embedding(vocab, a["embed"])
        self.lstm = nn.LSTM(a["embed"], a["hidden"], num_layers=1, batch_first=True)
        self.fc = nn.Linear(a["hidden"], classes)
        init_(self)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.fc(out[:, -1])
