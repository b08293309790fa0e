"""mobile/coreml, a convert-only target: Core ML Tools converts PyTorch programs and SavedModels (Keras's,
onnx2tf's) here; Core ML predicts only on Apple platforms, so the target reports its conversion — size, op
counts, or the op it failed on — and is skipped with that reason, never a pass."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, by_id, check_json

pytestmark = pytest.mark.mobile


@pytest.mark.parametrize("source", ["torch_cnn.pt2", "keras_cnn.keras", "lenet.onnx"])
def test_coreml_converts_and_says_it_does_not_run_here(tmp_path, source):
    r = check_json(tmp_path, FIXTURES / source, "--targets", "mobile/coreml")
    cm = by_id(r)["mobile/coreml"]
    assert cm["status"] == "skipped" and not cm["gating"], cm
    assert "Core ML predicts only on Apple platforms" in cm["error"] and "convert-only" in cm["error"]
    assert cm["artifact"]["format"] == "coreml" and cm["artifact"]["size_bytes"] > 10_000
    ops = cm["details"]["artifact_meta"]["ops"]
    assert ops.get("conv", 0) >= 1 and ops.get("linear", 0) >= 1, ops
    last = cm["details"]["conversions"][-1]["converter"].split()[0]
    assert last == ("CoremlFromTorch" if source.endswith(".pt2") else "CoremlFromSavedModel")


def test_an_op_core_ml_lacks_is_a_convert_error_naming_it(tmp_path):
    import torch

    class Det(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.det(x).unsqueeze(-1) * x[..., 0]

    path = tmp_path / "det.pt2"
    torch.export.save(torch.export.export(Det(), (torch.randn(2, 3, 3),)), str(path))
    r = check_json(tmp_path, path, "--targets", "mobile/coreml")
    cm = by_id(r)["mobile/coreml"]
    assert cm["status"] == "convert-error" and cm["op"] == "linalg_det", cm
    assert "Core ML Tools could not convert the PyTorch program" in cm["error"]
