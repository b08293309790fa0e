"""Larger models for the quantization rescue's measurements (``bench/bench_rescue.py``), built offline, seeded.

- ``mobilenet_like``: a MobileNetV3-style classifier for ``fixtures/digits.npz`` (1x1x28x28, 10 classes): a
  hard-swish stem, inverted residual blocks (1x1 expansion, depthwise 3x3/5x5, squeeze-and-excitation with a
  hard sigmoid, 1x1 projection, residual adds), a 1x1 head, global average pooling and two fully connected
  layers. Trained briefly (Adam, a few epochs on the first ``train`` digits) so that its accuracy means
  something; the batch norms are folded into the convolutions by the export.
- ``picodet_like``: a PicoDet-style detector with seeded random weights (no training): an ESNet/ShuffleNetV2
  backbone (channel split, depthwise convolutions, channel shuffle, hard-swish), a PAN-ish neck (1x1 lateral
  convolutions, nearest upsampling top-down, strided depthwise convolutions bottom-up) and a GFL-style head
  shared-less per level: class scores (sigmoid) and box regressions (a softmax over ``reg_max + 1`` bins per
  side, integrated with a projection MatMul, scaled by the level's stride) as two outputs, ``scores``
  [1, N, classes] and ``boxes`` [1, N, 4]. The batch norms get seeded random affine parameters and statistics
  from one forward pass of seeded inputs, so that activations stay in range and channels differ in scale as a
  trained network's do. ``document_inputs`` makes seeded page-like inputs for it (white pages with dark
  text-like blocks, ImageNet-normalized).

Both export with ``torch.onnx.export`` (TorchScript exporter, ``dynamo=False``, opset 17) to a fixed batch of 1.
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _torch():
    import torch

    return torch


def _conv_bn(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1, act: str | None = "hswish"):
    import torch.nn as nn

    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act == "hswish":
        layers.append(nn.Hardswish())
    elif act == "relu":
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------------- MobileNet-like
def _mobilenet(num_classes: int = 10):
    import torch.nn as nn

    class SE(nn.Module):
        def __init__(self, c: int, r: int = 4):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(c, max(8, c // r), 1)
            self.fc2 = nn.Conv2d(max(8, c // r), c, 1)
            self.relu, self.gate = nn.ReLU(), nn.Hardsigmoid()

        def forward(self, x):
            return x * self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, exp: int, cout: int, k: int, stride: int, se: bool, act: str):
            super().__init__()
            body = [] if exp == cin else [_conv_bn(cin, exp, 1, act=act)]
            body.append(_conv_bn(exp, exp, k, stride, groups=exp, act=act))
            if se:
                body.append(SE(exp))
            body.append(_conv_bn(exp, cout, 1, act=None))
            self.body = nn.Sequential(*body)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    # (in, expansion, out, kernel, stride, SE, activation): MobileNetV3-Small's pattern, narrowed for 28x28 digits
    spec = [(16, 16, 16, 3, 2, True, "relu"),      # 14 -> 7
            (16, 64, 24, 3, 1, False, "relu"),
            (24, 72, 24, 3, 1, False, "relu"),
            (24, 96, 40, 5, 2, True, "hswish"),    # 7 -> 4
            (40, 240, 40, 5, 1, True, "hswish"),
            (40, 120, 48, 5, 1, True, "hswish")]
    blocks = [_conv_bn(1, 16, 3, 2, act="hswish")]  # 28 -> 14
    blocks += [InvertedResidual(*s) for s in spec]
    blocks += [_conv_bn(48, 288, 1, act="hswish"), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(288, 256), nn.Hardswish(), nn.Dropout(0.1), nn.Linear(256, num_classes)]
    return nn.Sequential(*blocks)


def mobilenet_like(path, dataset: Path = FIXTURES / "digits.npz", train: int = 400, epochs: int = 10,
                   seed: int = 0, threads: int = 1) -> dict:
    """Train the MobileNet-like classifier on the first ``train`` samples of ``dataset`` and export it to
    ``path`` (ONNX). Returns ``{"path", "params", "train_seconds", "train_accuracy", "held_out_accuracy"}``
    (the held-out figure: the samples after ``train``, in float)."""
    torch = _torch()
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    d = np.load(dataset)
    x, y = torch.from_numpy(d["x"].astype(np.float32)), torch.from_numpy(d["y"].astype(np.int64))
    net = _mobilenet()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    net.train()
    for _ in range(epochs):
        order = torch.randperm(train, generator=gen)
        for i in range(0, train, 32):
            idx = order[i:i + 32]
            opt.zero_grad()
            loss_fn(net(x[idx]), y[idx]).backward()
            opt.step()
    seconds = time.perf_counter() - t0
    net.eval()
    with torch.no_grad():
        pred = net(x).argmax(1)
    acc_train = float((pred[:train] == y[:train]).float().mean())
    acc_held = float((pred[train:] == y[train:]).float().mean()) if len(y) > train else None
    path = Path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x[:1],), str(path), input_names=["x"], output_names=["logits"], opset_version=17,
                          dynamo=False, do_constant_folding=True)
    return {"path": path, "params": sum(p.numel() for p in net.parameters()), "train_seconds": round(seconds, 1),
            "train_accuracy": round(acc_train, 4), "held_out_accuracy": None if acc_held is None else round(acc_held, 4)}


# ---------------------------------------------------------------------------------------------- PicoDet-like
def _picodet(num_classes: int = 5, reg_max: int = 7, neck: int = 64, strides=(8, 16, 32)):
    import torch
    import torch.nn as nn

    def shuffle(x, groups: int = 2):
        n, c, h, w = (int(d) for d in x.shape)  # constants in the export (a fixed input size), no Shape ops
        return x.reshape(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)

    class ShuffleBlock(nn.Module):
        """ESNet's unit: stride 1 splits the channels and transforms one half; stride 2 transforms both."""

        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.stride = stride
            half = cout // 2
            if stride == 2:
                self.left = nn.Sequential(_conv_bn(cin, cin, 3, 2, groups=cin, act=None), _conv_bn(cin, half, 1))
                inner = cin
            else:
                inner = cin // 2
            self.right = nn.Sequential(_conv_bn(inner, half, 1), _conv_bn(half, half, 3, stride, groups=half, act=None),
                                       _conv_bn(half, half, 1))

        def forward(self, x):
            if self.stride == 1:
                half = int(x.shape[1]) // 2
                a, b = x[:, :half], x[:, half:]
                return shuffle(torch.cat([a, self.right(b)], 1))
            return shuffle(torch.cat([self.left(x), self.right(x)], 1))

    def stage(cin: int, cout: int, repeats: int):
        return nn.Sequential(ShuffleBlock(cin, cout, 2), *[ShuffleBlock(cout, cout, 1) for _ in range(repeats)])

    class Head(nn.Module):
        """GFL-style, one per level: two depthwise-separable convolutions, then class scores and a box
        distribution (reg_max + 1 bins per side)."""

        def __init__(self, stride: int):
            super().__init__()
            self.stride = stride
            self.tower = nn.Sequential(_conv_bn(neck, neck, 3, groups=neck, act=None), _conv_bn(neck, neck, 1),
                                       _conv_bn(neck, neck, 3, groups=neck, act=None), _conv_bn(neck, neck, 1))
            self.cls = nn.Conv2d(neck, num_classes, 1)
            self.reg = nn.Conv2d(neck, 4 * (reg_max + 1), 1)
            nn.init.constant_(self.cls.bias, -4.6)  # prior probability 0.01, as GFL initializes it

        def forward(self, x):
            t = self.tower(x)
            b, n = int(t.shape[0]), int(t.shape[2]) * int(t.shape[3])
            scores = torch.sigmoid(self.cls(t)).reshape(b, num_classes, n).transpose(1, 2)        # [1, HW, C]
            dist = self.reg(t).reshape(b, 4 * (reg_max + 1), n).transpose(1, 2).reshape(b, n, 4, reg_max + 1)
            return scores, dist

    class PicoDetLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(_conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1))           # 96 -> 48 -> 24
            self.c3, self.c4, self.c5 = stage(24, 48, 2), stage(48, 96, 3), stage(96, 192, 2)  # 12, 6, 3
            self.lat = nn.ModuleList([_conv_bn(c, neck, 1) for c in (48, 96, 192)])
            self.td = nn.ModuleList([nn.Sequential(_conv_bn(neck, neck, 3, groups=neck, act=None), _conv_bn(neck, neck, 1))
                                     for _ in range(2)])
            self.down = nn.ModuleList([_conv_bn(neck, neck, 3, 2, groups=neck, act=None) for _ in range(2)])
            self.bu = nn.ModuleList([nn.Sequential(_conv_bn(neck, neck, 3, groups=neck, act=None), _conv_bn(neck, neck, 1))
                                     for _ in range(2)])
            self.heads = nn.ModuleList([Head(s) for s in strides])
            self.register_buffer("project", torch.arange(reg_max + 1, dtype=torch.float32).reshape(-1, 1))

        def forward(self, image):
            c3 = self.c3(self.stem(image))
            c4 = self.c4(c3)
            c5 = self.c5(c4)
            p3, p4, p5 = (lat(c) for lat, c in zip(self.lat, (c3, c4, c5)))
            up = nn.functional.interpolate
            p4 = self.td[0](p4 + up(p5, scale_factor=2.0, mode="nearest"))
            p3 = self.td[1](p3 + up(p4, scale_factor=2.0, mode="nearest"))
            p4 = self.bu[0](p4 + self.down[0](p3))
            p5 = self.bu[1](p5 + self.down[1](p4))
            scores, boxes = [], []
            for head, p in zip(self.heads, (p3, p4, p5)):
                s, dist = head(p)
                scores.append(s)
                # the distribution's expectation per side (the integral), in pixels
                boxes.append(torch.matmul(torch.softmax(dist, dim=-1), self.project).squeeze(-1) * float(head.stride))
            return torch.cat(scores, 1), torch.cat(boxes, 1)

    return PicoDetLike()


def document_inputs(n: int, seed: int = 0, size: int = 96) -> np.ndarray:
    """``n`` page-like images [n, 3, size, size]: white with dark text-like lines in a few blocks, a coloured
    figure now and then, ImageNet-normalized (as PicoDet's preprocessing does)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 3, size, size), np.float32)
    for i in range(n):
        page = np.full((size, size, 3), 0.96, np.float32) + rng.normal(0, 0.01, (size, size, 3)).astype(np.float32)
        for _ in range(rng.integers(2, 5)):
            y0, x0 = rng.integers(2, size - 20, 2)
            h, w = rng.integers(8, size - y0), rng.integers(12, size - x0)
            if rng.random() < 0.25:  # a figure: a coloured block
                page[y0:y0 + h, x0:x0 + w] = rng.uniform(0.1, 0.9, 3)
                continue
            for line in range(y0, min(size, y0 + h), 3):  # text: dark broken lines
                ink = rng.random(w) < 0.6
                page[line, x0:x0 + w][ink] = rng.uniform(0.0, 0.3)
        out[i] = np.clip(page, 0, 1).transpose(2, 0, 1)
    mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
    std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
    return (out - mean) / std


def picodet_like(path, seed: int = 0, size: int = 96, num_classes: int = 5) -> dict:
    """Export the PicoDet-like detector (seeded random weights, see the module doc) to ``path`` (ONNX).
    Returns ``{"path", "params", "anchors"}``."""
    torch = _torch()
    import torch.nn as nn

    torch.manual_seed(seed)
    net = _picodet(num_classes)
    gen = torch.Generator().manual_seed(seed + 1)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):  # channels of different scales, as in a trained network
            m.weight.data = torch.exp(torch.randn(m.num_features, generator=gen) * 0.5)
            m.bias.data = torch.randn(m.num_features, generator=gen) * 0.2
            m.momentum = None  # a cumulative average: the statistics of the calibration pass below
    net.train()
    with torch.no_grad():  # batch-norm statistics from seeded page-like inputs
        net(torch.from_numpy(document_inputs(16, seed=seed + 2, size=size)))
    net.eval()
    path = Path(path)
    x = torch.from_numpy(document_inputs(1, seed=seed, size=size))
    with warnings.catch_warnings():  # the tracer's warnings about the shapes made constants (on purpose)
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), str(path), input_names=["image"], output_names=["scores", "boxes"],
                          opset_version=17, dynamo=False, do_constant_folding=True)
    with torch.no_grad():
        s, b = net(x)
    return {"path": path, "params": sum(p.numel() for p in net.parameters()), "anchors": int(s.shape[1]),
            "scores": list(s.shape), "boxes": list(b.shape)}
