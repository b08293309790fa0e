"""Keras 3 building blocks shared by the study's architectures: the spec's initialization family and the
layer factories (functional API; images are channels-last; built-in layers only)."""
from __future__ import annotations

import keras
from keras import layers as L

from models import spec

KERNEL = "glorot_uniform"  # conv/dense kernels, LSTM input and recurrent kernels
BIAS = "zeros"


def act(name: str) -> L.Layer:
    return L.Activation(name)


def pool(kind: str) -> L.Layer:
    return {"max": L.MaxPooling2D, "avg": L.AveragePooling2D}[kind](2)


def conv(x, filters: int, kernel: int, stride: int = 1, padding: int = 0, bias: bool = True):
    """A convolution with PyTorch's symmetric zero padding: ``"same"`` where that is the same thing
    (stride 1, ``2·padding = kernel - 1``), otherwise explicit ``ZeroPadding2D`` (Keras's ``"same"`` at
    stride 2 pads only bottom/right)."""
    if padding and stride == 1 and 2 * padding == kernel - 1:
        mode = "same"
    else:
        mode = "valid"
        if padding:
            x = L.ZeroPadding2D(padding)(x)
    return L.Conv2D(filters, kernel, strides=stride, padding=mode, use_bias=bias,
                    kernel_initializer=KERNEL, bias_initializer=BIAS)(x)


def dense(x, units: int):
    return L.Dense(units, kernel_initializer=KERNEL, bias_initializer=BIAS)(x)


def bn(x, a: dict):
    return L.BatchNormalization(epsilon=a["bn_eps"], momentum=a["bn_momentum"],
                                gamma_initializer="ones", beta_initializer="zeros")(x)


def image_input(shape=(28, 28), channels: int = 1):
    return keras.Input(shape=(*shape, channels), dtype="float32", name="x")


def conv_net(a: dict, classes: int, shape=(28, 28), channels: int = 1, name: str = "convnet") -> keras.Model:
    """LeNet family: ``convs`` (conv → act → 2×2 pool each), flatten, ``dense`` hidden layers (→ act),
    the classifier (logits)."""
    inp = image_input(shape, channels)
    x = inp
    for out, k, p in a["convs"]:
        x = pool(a["pool"])(act(a["act"])(conv(x, out, k, padding=p)))
    x = L.Flatten()(x)
    for width in a["dense"]:
        x = act(a["act"])(dense(x, width))
    return keras.Model(inp, dense(x, classes), name=name)


def basic_block(x, width: int, stride: int, a: dict):
    """conv3×3(stride) - BN - ReLU - conv3×3 - BN, plus the shortcut (1×1 conv(stride) + BN when the
    shape changes), then ReLU. Convolutions before a BN have no bias."""
    y = L.ReLU()(bn(conv(x, width, 3, stride, 1, bias=False), a))
    y = bn(conv(y, width, 3, 1, 1, bias=False), a)
    short = bn(conv(x, width, 1, stride, 0, bias=False), a) if stride != 1 or x.shape[-1] != width else x
    return L.ReLU()(L.Add()([y, short]))


def resnet(a: dict, classes: int, shape=(28, 28), channels: int = 1, name: str = "resnet") -> keras.Model:
    inp = image_input(shape, channels)
    x = L.ReLU()(bn(conv(inp, a["stem"], 3, 1, 1, bias=False), a))
    for width, stride in a["stages"]:
        for i in range(a["blocks"]):
            x = basic_block(x, width, stride if i == 0 else 1, a)
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, dense(x, classes), name=name)


def lstm_classifier(a: dict, classes: int, vocab: int = spec.TEXT["vocab"], length: int = spec.TEXT["length"],
                    name: str = "lstm") -> keras.Model:
    """embedding → one LSTM layer (no masking: pads are ordinary tokens) → the last step's hidden
    state → dense."""
    inp = keras.Input(shape=(length,), dtype="int32", name="x")
    x = L.Embedding(vocab, a["embed"], embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05),
                    mask_zero=False)(inp)
    x = L.LSTM(a["hidden"], kernel_initializer=KERNEL, recurrent_initializer=KERNEL, bias_initializer=BIAS,
               unit_forget_bias=False, return_sequences=False)(x)
    return keras.Model(inp, dense(x, classes), name=name)
