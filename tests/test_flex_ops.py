"""A TensorFlow (Flex) op in a ``.tflite`` file is that op's failure on every LiteRT runtime: LiteRT refuses
the file, and LiteRT.js, which runs the unresolved op silently and returns garbage, is refused it before it
runs — never a `drift` that calls the model wrong."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import by_id, check_json


def _erf_model(path) -> None:
    """y = x · W then the exact GELU (``Erf``), which onnx2tf lowers to the Flex op ``FlexErf``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = (np.random.default_rng(0).standard_normal((16, 16)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]),
             helper.make_node("Div", ["m", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["m", "a"], ["p"]),
             helper.make_node("Mul", ["p", "half"], ["y"])]
    consts = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
              numpy_helper.from_array(np.array(1, np.float32), "one"), numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], consts)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def test_custom_ops_are_read_from_the_flatbuffer(tmp_path):
    from conftest import FIXTURES

    from portability.runtimes.litert import custom_ops

    assert custom_ops(FIXTURES / "keras_cnn.tflite") == []  # built-in ops only
    (tmp_path / "bad.tflite").write_bytes(b"\x00" * 64)
    assert custom_ops(tmp_path / "bad.tflite") == []  # unreadable: nothing claimed, the runtime says the rest


@pytest.mark.web
@pytest.mark.mobile
def test_a_flex_op_is_a_load_error_on_litert_and_litert_js(tmp_path):
    _erf_model(tmp_path / "gelu.onnx")
    r = check_json(tmp_path, tmp_path / "gelu.onnx", "--targets", "mobile/tflite-fp32,web/litert-js", "--runs", "0",
                   expect_rc=1)
    t = by_id(r)
    for tid in ("mobile/tflite-fp32", "web/litert-js"):
        assert t[tid]["status"] == "load-error", (tid, t[tid]["status"], t[tid]["error"], t[tid]["metrics"].get("outputs"))
        assert t[tid]["op"] == "FlexErf" and "Flex" in t[tid]["error"], t[tid]
