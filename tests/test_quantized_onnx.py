"""Quantized and half-precision ONNX as ONNX Runtime ships them (dynamic int8, static QDQ int8 calibrated on
the check's inputs, float16), run on the server and in the browser, judged on what they still predict."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, by_id, check_json

pytestmark = pytest.mark.web

SERVER = ["server/ort-int8", "server/ort-qdq", "server/ort-fp16"]
WEB = ["web/ort-wasm-int8", "web/ort-wasm-qdq", "web/ort-wasm-fp16", "web/ort-webgpu-fp16"]


def test_quantized_onnx_on_the_server_and_in_the_browser(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", ",".join(SERVER + WEB),
                   "--dataset", str(FIXTURES / "digits.npz"), "--allow-skipped")  # webgpu-fp16: no shader-f16 on SwiftShader
    t = by_id(r)
    size = lambda i: t[i]["artifact"]["size_bytes"]  # noqa: E731
    fp32 = size("server/ort-cpu")
    meta = lambda i: t[i]["details"]["artifact_meta"]  # noqa: E731
    for i in SERVER + WEB[:3]:
        assert t[i]["status"] == "pass", (i, t[i].get("error"), t[i].get("breaches"))
        assert not t[i]["gating"] and t[i]["metrics"]["top1_agreement"] >= 0.95, i
        assert abs(t[i]["metrics"]["accuracy_delta"]) <= 0.01, i
    # what each quantization made: integer ops in the int8 models, weights a quarter (int8) or half (fp16) the size
    assert {"ConvInteger", "MatMulInteger"} & set(meta("server/ort-int8")["quantized_ops"])
    assert {"QuantizeLinear", "DequantizeLinear"} <= set(meta("server/ort-qdq")["quantized_ops"])
    assert meta("server/ort-qdq")["calibration"].startswith("dataset")
    assert size("server/ort-qdq") < 0.4 * fp32 and size("server/ort-int8") < 0.4 * fp32
    assert 0.45 * fp32 < size("server/ort-fp16") < 0.6 * fp32
    # a QDQ model's output comes from a DequantizeLinear: its drift is also given in quantization steps
    for i in ("server/ort-qdq", "web/ort-wasm-qdq"):
        (out,) = t[i]["metrics"]["outputs"].values()
        assert out["quant_scale"] > 0 and out["max_abs_steps"] == pytest.approx(out["max_abs"] / out["quant_scale"])
    # the same artifact, server and browser: the browser's kernels agree with the server's to a step or so
    s, w = t["server/ort-qdq"]["metrics"]["outputs"], t["web/ort-wasm-qdq"]["metrics"]["outputs"]
    assert abs(s["logits"]["cosine"] - w["logits"]["cosine"]) < 1e-3
    gpu = t["web/ort-webgpu-fp16"]
    assert gpu["status"] == "pass" or (gpu["status"] == "skipped" and "shader-f16" in gpu["error"]), gpu


def _two_matmuls(path):
    """A transformer's feed-forward block as an exporter writes it for a [batch, sequence, hidden] input: MatMul
    by a constant weight, ReLU, MatMul (seeded weights)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array(rng.normal(0, 0.2, s).astype(np.float32), n) for n, s in
              (("w1", (64, 128)), ("w2", (128, 10))))
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["logits"])], "ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 8, 10])], [w1, w2])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


Q4 = ["server/ort-q4", "web/ort-wasm-q4", "web/ort-webgpu-q4"]


def test_q4_and_q8_variants_of_a_transformer_block(tmp_path):
    """transformers.js's web variants: 4-bit weights (MatMulNBits) on wasm and WebGPU, and int8 on WebGPU;
    judged on what they still predict, every position's top-1 over the last axis."""
    model = _two_matmuls(tmp_path / "ffn.onnx")
    r = check_json(tmp_path, model, "--targets", ",".join(Q4 + ["web/ort-webgpu-int8", "web/ort-wasm-int8"]))
    t = by_id(r)
    for i in Q4:
        assert t[i]["details"]["artifact_meta"]["quantized_ops"] == {"MatMulNBits": 2}, i
        assert t[i]["status"] == "pass" and not t[i]["gating"], (i, t[i].get("error"), t[i].get("breaches"))
        assert 0.98 <= t[i]["metrics"]["outputs"]["logits"]["cosine"] < 1.0, i  # 4-bit weights move the outputs, within q4's bounds
    assert t["server/ort-q4"]["artifact"]["size_bytes"] < 0.25 * t["server/ort-cpu"]["artifact"]["size_bytes"]
    # the same file on the server and in both browser back ends: the kernels agree far inside the quantization's error
    cos = [t[i]["metrics"]["outputs"]["logits"]["cosine"] for i in Q4]
    assert max(cos) - min(cos) < 1e-4, cos
    for i in ("web/ort-webgpu-int8", "web/ort-wasm-int8"):
        assert t[i]["status"] == "pass" and {"MatMulInteger"} <= set(t[i]["details"]["artifact_meta"]["quantized_ops"]), i
    # a CNN has no MatMul to make 4-bit: its q4 targets are skipped, saying why, not the float model run again
    (tmp_path / "cnn").mkdir()
    r = check_json(tmp_path / "cnn", FIXTURES / "lenet.onnx", "--targets", ",".join(Q4), "--allow-skipped")
    for i in Q4:
        assert by_id(r)[i]["status"] == "skipped" and "no MatMul with a constant weight" in by_id(r)[i]["error"], i


def test_a_matmul_in_a_branch_counts_and_a_cnn_has_none_to_make_4_bit():
    """Whether a model has a MatMul to make 4-bit is known from its graph before the quantizer is imported, an
    If's branch and a Loop's body included."""
    from onnx import TensorProto, helper, load

    from portability.converters.ort_quant import _has_op

    assert not _has_op(load(str(FIXTURES / "lenet.onnx")).graph, "MatMul")  # Gemm and Conv only
    v = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2])  # noqa: E731
    branch = lambda op: helper.make_graph([helper.make_node(op, ["x", "x"], ["y"])], op, [], [v("y")])  # noqa: E731
    node = helper.make_node("If", ["c"], ["out"], then_branch=branch("MatMul"), else_branch=branch("Add"))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []), v("x")], [v("out")])
    assert _has_op(graph, "MatMul") and not _has_op(graph, "Gemm")


def test_a_conversion_with_nothing_to_do_is_remembered_and_its_target_starts_no_worker_again(tmp_path):
    """A 4-bit variant of a model with no MatMul: the first check's worker finds so, the artifact cache remembers it
    (the same model and converter always say so), and the next check skips the target before its worker starts,
    saying the same."""
    env = {"PORTABILITY_CACHE_DIR": str(tmp_path / "cache")}
    args = ("--targets", "server/ort-q4", "--allow-skipped")
    first = by_id(check_json(tmp_path, FIXTURES / "lenet.onnx", *args, env=env))["server/ort-q4"]
    assert first["status"] == "skipped" and "no MatMul with a constant weight" in first["error"]
    assert "convert" in first["details"]["phases_s"]  # a worker ran
    again = by_id(check_json(tmp_path, FIXTURES / "lenet.onnx", *args, env=env))["server/ort-q4"]
    assert again["status"] == first["status"] and again["error"] == first["error"] and again["gating"] == first["gating"]
    assert "phases_s" not in again["details"]  # none did
    other = by_id(check_json(tmp_path, FIXTURES / "mlp.onnx", *args, env=env))["server/ort-q4"]  # another model: its own
    assert "phases_s" in other["details"]
