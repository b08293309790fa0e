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
                   "--dataset", str(FIXTURES / "digits.npz"))
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
