"""A model exported at a static batch of 2 (not 1): the int8 targets calibrate on batches of the shape the
model takes, so static QDQ (ONNX Runtime) and full-integer TFLite both convert and pass."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import by_id, check_json

_MOBILE_MISSING = [m for m in ("onnx2tf", "tensorflow", "tf_keras", "ai_edge_litert") if importlib.util.find_spec(m) is None]


def _mlp(path, batch=2):
    """x [batch, 16] -> MatMul -> Add -> Relu -> Reshape [batch, 8] -> MatMul -> y [batch, 4], static shapes
    throughout (the Reshape's constant shape holds only for a batch of ``batch``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.5, n)
             for n, s in (("w1", (16, 8)), ("b1", (8,)), ("w2", (8, 4)))]
    inits.append(numpy_helper.from_array(np.array([batch, 8], np.int64), "shape"))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["rs"]),
             helper.make_node("MatMul", ["rs", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _pt2(path):
    """A small CNN as a ``torch.export`` program traced at a static batch of 2 (input [2, 1, 28, 28])."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, stride=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(4 * 6 * 6, 10)).eval()
    with torch.no_grad():  # logits well apart: an untrained net's near-ties would flip top-1 under int8
        net[-1].bias.copy_(torch.arange(10.0) * 0.5)
    torch.export.save(torch.export.export(net, (torch.rand(2, 1, 28, 28),)), str(path))
    return path


def _passes(tmp_path, model, target):
    t = by_id(check_json(tmp_path, model, "--targets", target, expect_rc=None))[target]
    assert t["status"] == "pass", (t["status"], t.get("error"), t.get("breaches"))
    return t


def test_static_batch_onnx_qdq(tmp_path):
    t = _passes(tmp_path, _mlp(tmp_path / "mlp_b2.onnx"), "server/ort-qdq")
    assert "QuantizeLinear" in t["details"]["artifact_meta"]["quantized_ops"]


def test_static_batch_pt2_qdq(tmp_path):
    _passes(tmp_path, _pt2(tmp_path / "mlp_b2.pt2"), "server/ort-qdq")


@pytest.mark.mobile
@pytest.mark.skipif(bool(_MOBILE_MISSING), reason=f"mobile stack not installed: {', '.join(_MOBILE_MISSING)}")
def test_static_batch_tflite_int8(tmp_path):
    _passes(tmp_path, _mlp(tmp_path / "mlp_b2.onnx"), "mobile/tflite-int8")
    _passes(tmp_path, _pt2(tmp_path / "cnn_b2.pt2"), "mobile/tflite-int8")


def _square(path):
    """y = Relu((x @ x) @ W), x [n, n]: the batch dimension is also the other axis (a model the check runs at the
    shape ``--shape`` gives), IR 6 / opset 11, outputs in the hundreds."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((8, 8)) * 30).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "x"], ["xx"]), helper.make_node("MatMul", ["xx", "w"], ["y0"]),
             helper.make_node("Relu", ["y0"], ["y"])]
    graph = helper.make_graph(nodes, "square", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_a_dynamic_batch_shared_with_another_axis_calibrates_at_the_checks_shape(tmp_path):
    """Calibration fed such a model one row per call (x [1, 8]: x @ x cannot run); it takes the check's shape now."""
    from portability.converters.calibration import batch_of

    assert batch_of([{"name": "x", "shape": ["n", "n"]}], {"x": [8, 8]}) == {"x": 8}
    assert batch_of([{"name": "x", "shape": [2, 16]}], {"x": [8, 16]}) == {"x": 2}  # a static batch stays its own
    assert batch_of([{"name": "x", "shape": ["n", 16]}]) == {"x": 1}
    t = by_id(check_json(tmp_path, _square(tmp_path / "square.onnx"), "--shape", "x=8x8", "--targets", "server/ort-qdq",
                         expect_rc=None))["server/ort-qdq"]
    assert t["status"] == "pass", (t["status"], t.get("error"), t.get("breaches"))
    assert "QuantizeLinear" in t["details"]["artifact_meta"]["quantized_ops"]


def test_tflite_calibration_items_take_the_static_batch():
    from portability.converters.base import ConvertContext
    from portability.converters.onnx2tf import _calibration

    io = {"inputs": [{"onnx": "x", "index": 0, "tensor": "serving_default_x:0", "shape": [2, 16], "dtype": "float32",
                      "to_tflite": [0, 1], "key": "x"}], "outputs": []}
    rows = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    for shape, items in (([2, 16], 4), (["batch", 16], 8)):
        sig = {"inputs": [{"name": "x", "shape": shape, "dtype": "float32"}]}
        io["inputs"][0]["shape"] = [2 if shape[0] == 2 else 1, 16]
        samples, what = _calibration(ConvertContext(calibration={"x": rows}, calibration_source="dataset"), io, sig)
        assert len(samples) == items and what.startswith("dataset (8 samples")
        assert samples[0]["x"].shape == (8 // items, 16) and (samples[-1]["x"][-1] == rows[-1]).all()


def test_failure_messages_say_what_failed():
    from portability.converters.calibration import converter_error_lines
    from portability.converters.ort_quant import _failed

    e = _failed("static QDQ quantization", RuntimeError("Got invalid dimensions for input: x for the following indices\n"
                                                        " index: 0 Got: 1 Expected: 2\n Please fix either the inputs/the model."))
    assert "index: 0 Got: 1 Expected: 2" in str(e) and "Please fix" in str(e)
    assert len(str(_failed("x", RuntimeError("y" * 5000)))) < 1400
    tf = RuntimeError("/venv/lib/python3.11/site-packages/tensorflow/lite/kernels/reshape.cc:92 "
                      "num_input_elements != num_output_elements (16 != 32)\nNode number 2 (RESHAPE) failed to prepare.")
    assert converter_error_lines(tf) == ["reshape.cc:92 num_input_elements != num_output_elements (16 != 32)",
                                         "Node number 2 (RESHAPE) failed to prepare."]
