"""Outputs in the hundreds (a detector's boxes in pixels, a regressor's prices) are judged at their own
precision: float32 rounding there is a few 1e-4, float16's a few 1e-1, and neither is a wrong model."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import by_id, check_json, run_cli


def _boxes_model(path, bias: float, scale: float = 1.0) -> None:
    """y = x @ W + bias: eight outputs around ``bias`` from a 2048-long sum (its rounding differs between
    kernels that sum in another order); ``scale`` multiplies W (1.01: a wrong model)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((2048, 8)) * 0.7 * scale).astype(np.float32)
    b = np.full((8,), bias, np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                          "boxes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


@pytest.mark.mobile
def test_float_rounding_on_outputs_in_the_hundreds_is_no_drift(tmp_path):
    _boxes_model(tmp_path / "boxes.onnx", bias=300.0)
    targets = "server/ort-cpu-noopt,server/onnx-reference,server/ort-fp16,mobile/tflite-fp32,mobile/tflite-fp16"
    r = check_json(tmp_path, tmp_path / "boxes.onnx", "--targets", targets, "--runs", "0")
    ts = by_id(r)
    for tid in targets.split(","):
        t = ts[tid]
        y = t["metrics"]["outputs"]["y"]
        assert t["status"] == "pass", (tid, t["breaches"], y)
        assert 250 < y["ref_max_abs"] < 400, y
    # the test means something: LiteRT's float32 kernels round this sum beyond a fixed 1e-4, and float16
    # is held to float16's precision, not float32's
    assert ts["mobile/tflite-fp32"]["metrics"]["outputs"]["y"]["max_abs"] > 1e-4
    assert ts["server/ort-fp16"]["metrics"]["outputs"]["y"]["max_abs"] > 1e-3


def test_a_wrong_model_with_outputs_in_the_hundreds_is_still_caught(tmp_path):
    """Weights off by 1 % move the outputs by about a unit: far outside a few float32 steps of 300, so the
    JSON report of the right model, as a baseline, names the moved output."""
    _boxes_model(tmp_path / "boxes.onnx", bias=300.0)
    _boxes_model(tmp_path / "wrong.onnx", bias=300.0, scale=1.01)
    args = ("--targets", "server/ort-cpu-noopt", "--runs", "0")
    base = check_json(tmp_path, tmp_path / "boxes.onnx", *args)
    assert base["passed"]
    (tmp_path / "base.json").write_text((tmp_path / "report.json").read_text())
    p = run_cli("check", str(tmp_path / "wrong.onnx"), *args, "--baseline", str(tmp_path / "base.json"))
    assert p.returncode == 1 and "output 'y' changed since the baseline" in p.stdout, p.stdout + p.stderr
    p = run_cli("check", str(tmp_path / "boxes.onnx"), *args, "--baseline", str(tmp_path / "base.json"))
    assert p.returncode == 0 and "changed since the baseline" not in p.stdout, p.stdout + p.stderr
