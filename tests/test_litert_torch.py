"""litert-torch, PyTorch's native route to TFLite: a .pt2's float32 TFLite targets take it (no ONNX, no
onnx2tf), its .tflite keeps the program's NCHW layout and runs in LiteRT and in LiteRT.js; --via onnx takes
the ONNX route on the same targets, for comparison."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, by_id, check_json

pytestmark = [pytest.mark.mobile, pytest.mark.web]
TARGETS = "mobile/tflite-fp32,web/litert-js"


def _chain(t: dict) -> list[str]:
    return [c["converter"].split()[0] for c in t["details"]["conversions"]]


def test_a_pytorch_program_reaches_litert_natively_and_through_onnx(tmp_path):
    (tmp_path / "native").mkdir(), (tmp_path / "onnx").mkdir()
    native = by_id(check_json(tmp_path / "native", FIXTURES / "torch_cnn.pt2", "--targets", TARGETS))
    onnx = by_id(check_json(tmp_path / "onnx", FIXTURES / "torch_cnn.pt2", "--targets", TARGETS, "--via", "onnx"))
    for tid in TARGETS.split(","):
        n, o = native[tid], onnx[tid]
        assert n["status"] == "pass" and o["status"] == "pass", (tid, n.get("error"), o.get("error"))
        assert _chain(n) == ["TorchFromTorch", "TfliteFromTorch"], _chain(n)
        assert _chain(o)[:3] == ["TorchFromTorch", "OnnxFromTorch", "SavedModelFromOnnx"], _chain(o)
        assert n["details"]["artifact_meta"]["produced_by"].startswith("litert-torch ")
        for t in (n, o):
            (out,) = t["metrics"]["outputs"].values()
            assert out["max_abs"] < 1e-4 and out["cosine"] > 0.99999
    # litert-torch keeps the program's layout; onnx2tf makes the input channel-last
    (name,) = native["mobile/tflite-fp32"]["details"]["layout"]["inputs"]
    nchw = native["mobile/tflite-fp32"]["details"]["layout"]["inputs"][name]["shape"]
    nhwc = onnx["mobile/tflite-fp32"]["details"]["layout"]["inputs"][name]["shape"]
    assert nchw[1] < nchw[-1] and nhwc[-1] < nhwc[1], (nchw, nhwc)
