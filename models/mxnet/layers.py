"""MXNet Gluon building blocks shared by the study's architectures: the spec's initialization family and
the layer factories (images are channels-first, ``[N, 1, 28, 28]``; token ids float32 ``[N, L]``)."""
from __future__ import annotations

from models import spec
from models.mxnet import import_mxnet

mx = import_mxnet()
from mxnet import gluon  # noqa: E402
from mxnet.gluon import nn, rnn  # noqa: E402


def glorot():
    """Glorot (Xavier) uniform: U(±sqrt(6 / (fan_in + fan_out)))."""
    return mx.init.Xavier(rnd_type="uniform", factor_type="avg", magnitude=3)


def act(name: str) -> nn.HybridBlock:
    return nn.Activation(name)


def pool(kind: str) -> nn.HybridBlock:
    return {"max": nn.MaxPool2D, "avg": nn.AvgPool2D}[kind](pool_size=2, strides=2)


def conv(cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0, bias: bool = True) -> nn.Conv2D:
    return nn.Conv2D(cout, kernel, strides=stride, padding=padding, in_channels=cin, use_bias=bias,
                     weight_initializer=glorot(), bias_initializer="zeros")


def dense(cin: int, cout: int) -> nn.Dense:
    return nn.Dense(cout, in_units=cin, weight_initializer=glorot(), bias_initializer="zeros")


def bn(channels: int, a: dict) -> nn.BatchNorm:
    # MXNet's momentum is the spec's: avg = m·avg + (1-m)·batch
    return nn.BatchNorm(momentum=a["bn_momentum"], epsilon=a["bn_eps"], in_channels=channels,
                        gamma_initializer="ones", beta_initializer="zeros",
                        running_mean_initializer="zeros", running_variance_initializer="ones")


def conv_out(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class ConvNet(gluon.HybridBlock):
    """LeNet family: ``convs`` (conv → act → 2×2 pool each), flatten, ``dense`` hidden layers (→ act),
    the classifier."""

    def __init__(self, a: dict, classes: int, shape=(28, 28), channels: int = 1, **kw):
        super().__init__(**kw)
        h, w = shape
        with self.name_scope():
            self.features = nn.HybridSequential()
            c = channels
            for out, k, p in a["convs"]:
                self.features.add(conv(c, out, k, padding=p), act(a["act"]), pool(a["pool"]))
                h, w = conv_out(conv_out(h, k, 1, p), 2, 2), conv_out(conv_out(w, k, 1, p), 2, 2)
                c = out
            self.head = nn.HybridSequential()
            self.head.add(nn.Flatten())
            n = c * h * w
            for width in a["dense"]:
                self.head.add(dense(n, width), act(a["act"]))
                n = width
            self.head.add(dense(n, classes))

    def hybrid_forward(self, F, x):
        return self.head(self.features(x))


class BasicBlock(gluon.HybridBlock):
    """conv3×3(stride) - BN - ReLU - conv3×3 - BN, plus the shortcut (1×1 conv(stride) + BN when the
    shape changes), then ReLU. Convolutions before a BN have no bias (the BN's β is it)."""

    def __init__(self, cin: int, cout: int, stride: int, a: dict, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.conv1, self.bn1 = conv(cin, cout, 3, stride, 1, bias=False), bn(cout, a)
            self.conv2, self.bn2 = conv(cout, cout, 3, 1, 1, bias=False), bn(cout, a)
            self.shortcut = None
            if stride != 1 or cin != cout:
                self.shortcut = nn.HybridSequential()
                self.shortcut.add(conv(cin, cout, 1, stride, 0, bias=False), bn(cout, a))

    def hybrid_forward(self, F, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


class ResNet(gluon.HybridBlock):
    def __init__(self, a: dict, classes: int, channels: int = 1, **kw):
        super().__init__(**kw)
        w = a["stem"]
        with self.name_scope():
            self.stem = nn.HybridSequential()
            self.stem.add(conv(channels, w, 3, 1, 1, bias=False), bn(w, a), nn.Activation("relu"))
            self.blocks = nn.HybridSequential()
            for width, stride in a["stages"]:
                for i in range(a["blocks"]):
                    self.blocks.add(BasicBlock(w, width, stride if i == 0 else 1, a))
                    w = width
            self.pool = nn.GlobalAvgPool2D()
            self.fc = dense(w, classes)  # Dense flattens [N, C, 1, 1]

    def hybrid_forward(self, F, x):
        return self.fc(self.pool(self.blocks(self.stem(x))))


class LSTMClassifier(gluon.HybridBlock):
    """embedding → one LSTM layer (layout NTC; no masking: pads are ordinary tokens) → the last step's
    output (= its hidden state) → dense. Ids come in as float32 (MXNet's Embedding takes float ids)."""

    def __init__(self, a: dict, classes: int, vocab: int = spec.TEXT["vocab"], **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.embed = nn.Embedding(vocab, a["embed"], weight_initializer=mx.init.Uniform(0.05))
            self.lstm = rnn.LSTM(a["hidden"], num_layers=1, layout="NTC", input_size=a["embed"],
                                 i2h_weight_initializer=glorot(), h2h_weight_initializer=glorot(),
                                 i2h_bias_initializer="zeros", h2h_bias_initializer="zeros")
            self.fc = dense(a["hidden"], classes)

    def hybrid_forward(self, F, x):
        out = self.lstm(self.embed(x))                       # [N, T, H]
        last = F.slice_axis(out, axis=1, begin=-1, end=None)  # [N, 1, H]; Dense flattens it
        return self.fc(last)
