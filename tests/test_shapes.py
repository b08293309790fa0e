"""Fixing dynamic input shapes by input and axis: an export that gives one symbolic name to two axes (Paddle
writes ``?`` for every unknown axis) is fixed at two different sizes there, for the ORT format and for the
graph onnx2tf converts, and the result runs at that shape."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from portability.converters.base import ConvertContext
from portability.converters.ort_format import OrtFromOnnx
from portability.converters.shapes import fix_input_shapes
from portability.core.model import load_model

SHAPE = [1, 3, 8, 16]


def same_name_on_two_axes(tmp_path):
    """Conv -> Relu on x ``[-1, 3, ?, ?]``; the Conv's output declared ``[-1, 2, ?, ?]`` as well."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((2, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "paddle_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 2, "?", "?"])], [w],
                          value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, [-1, 2, "?", "?"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    path = tmp_path / "src" / "model.onnx"
    path.parent.mkdir()
    onnx.save(m, str(path))
    return path


def _dims(v) -> list:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in v.type.tensor_type.shape.dim]


def test_one_name_on_two_axes_is_fixed_per_axis(tmp_path):
    src = same_name_on_two_axes(tmp_path)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # the fixing the onnx2tf routes use
    assert fix_input_shapes(src, tmp_path / "fixed.onnx", {"x": SHAPE}) == {"x": SHAPE}
    m = onnx.load(str(tmp_path / "fixed.onnx"))
    onnx.checker.check_model(m, full_check=True)
    assert _dims(m.graph.input[0]) == SHAPE and _dims(m.graph.output[0]) == [1, 2, 8, 16]
    assert all("?" not in _dims(v) for v in m.graph.value_info)  # the ambiguous name is nowhere left
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, ref)
    # a name every axis gives one size is fixed throughout, as before
    fix_input_shapes(src, tmp_path / "square.onnx", {"x": [1, 3, 8, 8]})
    sq = onnx.load(str(tmp_path / "square.onnx"))
    assert _dims(sq.graph.value_info[0])[1:] == [2, 8, 8] and _dims(sq.graph.output[0]) == [1, 2, 8, 8]
    # the ORT format, with the shapes a check resolved
    info = load_model(src)
    (tmp_path / "ort").mkdir()
    art = OrtFromOnnx().convert(info.artifact(), tmp_path / "ort", {}, ConvertContext(input_shapes={"x": SHAPE}, timeout_s=300))
    assert art.format == "ort" and art.meta["shapes_fixed_for_usability_check"] == {"x": SHAPE}
    s = ort.InferenceSession(str(art.path), providers=["CPUExecutionProvider"])
    assert s.get_inputs()[0].shape == SHAPE
    np.testing.assert_allclose(s.run(None, {"x": x})[0], ref, rtol=1e-5, atol=1e-5)
