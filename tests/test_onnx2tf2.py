"""onnx2tf 2.x's direct backend, the second ONNX -> TFLite converter: taken only with --via TfliteFromOnnx2,
its float32 .tflite runs in LiteRT and agrees with ONNX Runtime as the 1.x route's does."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, by_id, check_json
from portability.engine.plan import plan
from portability.targets import registry

pytestmark = pytest.mark.mobile


def test_the_second_converter_is_taken_only_when_asked():
    t = registry()["mobile/tflite-fp32"]
    steps = lambda src, via=None: [p.rsplit(":", 1)[1] for p, _ in plan(src, t, via).steps]  # noqa: E731
    assert steps("onnx") == ["OnnxFromOnnx", "SavedModelFromOnnx", "TfliteFromSavedModel"]
    assert steps("onnx", "TfliteFromOnnx2") == ["OnnxFromOnnx", "TfliteFromOnnx2"]
    assert steps("torch", "TfliteFromOnnx2") == ["TorchFromTorch", "OnnxFromTorch", "TfliteFromOnnx2"]


def test_onnx2tf2_converts_a_lenet_that_runs_in_litert_and_agrees(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "mobile/tflite-fp32", "--via", "TfliteFromOnnx2",
                   "--dataset", str(FIXTURES / "digits.npz"))
    t = by_id(r)["mobile/tflite-fp32"]
    assert t["status"] == "pass", (t.get("error"), t.get("breaches"))
    assert t["details"]["artifact_meta"]["produced_by"].startswith("onnx2tf 2.")
    assert [c["converter"].split()[0] for c in t["details"]["conversions"]] == ["OnnxFromOnnx", "TfliteFromOnnx2"]
    assert t["metrics"]["outputs"]["logits"]["max_abs"] < 1e-4 and t["metrics"]["accuracy_delta"] == 0
    # the NHWC input it made is mapped back to the ONNX layout, as for 1.x's files
    assert t["details"]["layout"]["inputs"]["x"]["shape"] == [1, 28, 28, 1]
