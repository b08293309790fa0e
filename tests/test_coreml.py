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


def test_a_savedmodels_conversion_imports_no_pytorch_and_makes_the_same_program(tmp_path):
    """Core ML Tools imports PyTorch (and torchao through it) wherever it is installed, for its PyTorch frontend:
    5-9 s of a SavedModel's conversion. Imported with PyTorch hidden, the TensorFlow frontend makes the same ML
    program and the same weights as with PyTorch importable (the package's metadata aside: its conversion date)."""
    import subprocess
    import sys

    code = """
import hashlib, sys
from pathlib import Path
{first}
from portability.converters.base import ConvertContext
from portability.converters.coreml import CoremlFromSavedModel
from portability.core.artifact import Artifact
sm = Path({sm!r})
art = CoremlFromSavedModel().convert(Artifact(path=sm / "saved_model.pb", format="saved_model", sha256=""), Path({out!r}),
                                     {{}}, ConvertContext())
from coremltools.proto import Model_pb2
data = art.folder / "Data" / "com.apple.CoreML"
m = Model_pb2.Model()
m.ParseFromString((data / "model.mlmodel").read_bytes())
m.description.metadata.ClearField("userDefined")
print(hashlib.sha256(m.SerializeToString(deterministic=True)).hexdigest(),
      hashlib.sha256((data / "weights" / "weight.bin").read_bytes()).hexdigest(),
      sys.modules.get("torch") is not None, "torchao" in sys.modules)
"""
    answers = []
    for first in ("", "import torch"):
        p = subprocess.run([sys.executable, "-c", code.format(first=first, sm=str(FIXTURES / "keras_cnn_savedmodel"),
                                                               out=str(tmp_path / f"out{len(answers)}"))],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        answers.append(p.stdout.split())
    (program, weights, torch_loaded, torchao_loaded), with_torch = answers
    assert torch_loaded == "False" and torchao_loaded == "False"
    assert with_torch[2] == "True" and [program, weights] == with_torch[:2]
