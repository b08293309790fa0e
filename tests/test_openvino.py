"""OpenVINO on the CPU, a second runtime reading the source itself: ONNX and .tflite sources run as given
(its own frontends), a .pt2 through its ONNX export; float32 agrees with the reference, and its default
precision on this CPU (bfloat16 where the CPU has it) is reported as such."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, by_id, check_json


def test_openvino_runs_an_onnx_model_in_float32_and_in_its_default_precision(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "server/openvino,server/openvino-default",
                   "--dataset", str(FIXTURES / "digits.npz"))
    t = by_id(r)
    ov = t["server/openvino"]
    assert ov["status"] == "pass" and ov["gating"], ov.get("error")
    assert ov["details"]["read_from"] == "onnx" and ov["details"]["inference_precision"] == "f32"
    assert ov["runtime"].startswith("OpenVINO 2026.") and ov["details"]["backend_used"] == "CPU"
    assert ov["metrics"]["outputs"]["logits"]["max_abs"] < 1e-4 and ov["metrics"]["accuracy_delta"] == 0
    d = t["server/openvino-default"]
    assert d["status"] == "pass" and not d["gating"], d.get("error")
    assert d["details"]["inference_precision"] in ("f32", "bf16", "f16")
    if d["details"]["inference_precision"] == "bf16":  # bf16: 8 significant bits, visibly so
        assert d["metrics"]["outputs"]["logits"]["max_abs"] > ov["metrics"]["outputs"]["logits"]["max_abs"]


@pytest.mark.mobile
def test_openvino_reads_a_tflite_source_itself(tmp_path):
    r = check_json(tmp_path, FIXTURES / "keras_cnn.tflite", "--targets", "server/openvino")
    ov = by_id(r)["server/openvino"]
    assert ov["status"] == "pass", ov.get("error")
    assert ov["details"]["read_from"] == "tflite"
    assert [c["converter"].split()[0] for c in ov["details"]["conversions"]] == ["TfliteFromTflite"]
    (out,) = ov["metrics"]["outputs"].values()
    assert out["max_abs"] < 1e-4


def test_openvino_runs_a_torch_export_through_its_onnx_export(tmp_path):
    r = check_json(tmp_path, FIXTURES / "torch_cnn.pt2", "--targets", "server/openvino")
    ov = by_id(r)["server/openvino"]
    assert ov["status"] == "pass", ov.get("error")
    assert [c["converter"].split()[0] for c in ov["details"]["conversions"]] == ["TorchFromTorch", "OnnxFromTorch"]


def test_a_port_with_several_names_is_fed_and_read_by_the_graph_s_own_name(tmp_path):
    """OpenVINO folds an Identity into its neighbour and gives the port both tensors' names; its "any name"
    is then an inner tensor's (an input called after the Concat it feeds, T5's output after the layer norm
    before it). The check fed and read ports by that name: a KeyError run-error on GPT-2 with its cache, a
    missing output reported as drift on T5."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c = numpy_helper.from_array(np.ones((1, 4), np.float32), "c")
    g = helper.make_graph([
        helper.make_node("Identity", ["x"], ["/Concat_output_0"]),
        helper.make_node("Add", ["/Concat_output_0", "c"], ["hidden"]),
        helper.make_node("Identity", ["hidden"], ["last_hidden_state"])], "alias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, 4])], [c])
    model = tmp_path / "alias.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(model))
    r = check_json(tmp_path, model, "--targets", "server/openvino")
    t = by_id(r)["server/openvino"]
    assert t["status"] == "pass", (t.get("error"), t.get("breaches"))
    assert list(t["metrics"]["outputs"]) == ["last_hidden_state"]
