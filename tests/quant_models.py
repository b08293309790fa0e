"""Models the quantization tests build: float functions that quantize badly for a known reason.

``outlier_lenet``: the fixture LeNet (``fixtures/lenet.onnx``) with one activation outlier channel — the first
convolution's channel ``channel`` shifted by ``shift`` (its bias), the second convolution's bias compensating,
so that the first layer's activations span hundreds of times the others' range (a per-tensor int8 scale then
leaves the other channels a handful of steps) while the float function stays nearly what it was: the max-pool
and the second convolution (no padding) carry the constant shift exactly, the ReLU only where the channel's
pre-activation was already >= 0 — where it was negative, the ReLU used to clip it to 0 and now passes it
(shifted). Measured on ``fixtures/digits.npz`` (500 digits, channel 3, shift 300): logits differ from the
fixture's by up to 2.6, accuracy 97.8 % -> 97.2 % (channel 2 would change it least: up to 0.05). Compare
quantized variants with this model's own float accuracy, not the fixture's.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def outlier_lenet(path, channel: int = 3, shift: float = 1000.0) -> Path:
    """Write the outlier LeNet to ``path`` (an ``.onnx`` file) and return it."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(FIXTURES / "lenet.onnx"))
    inits = {i.name: i for i in m.graph.initializer}
    b0 = numpy_helper.to_array(inits["0.bias"]).astype(np.float32).copy()
    w1 = numpy_helper.to_array(inits["3.weight"]).astype(np.float64)
    b1 = numpy_helper.to_array(inits["3.bias"]).astype(np.float64).copy()
    b0[channel] += shift
    # the second convolution (no padding) sees the channel shifted by `shift` everywhere: take it out of its bias
    b1 -= shift * w1[:, channel, :, :].sum(axis=(1, 2))
    inits["0.bias"].CopyFrom(numpy_helper.from_array(b0, "0.bias"))
    inits["3.bias"].CopyFrom(numpy_helper.from_array(b1.astype(np.float32), "3.bias"))
    path = Path(path)
    onnx.save(m, str(path))
    return path
