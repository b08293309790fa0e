"""server/tf: TensorFlow on the SavedModel onnx2tf makes of the model, really run (the ONNX -> TF hop)."""
from __future__ import annotations

import importlib.util

import pytest

from conftest import FIXTURES, by_id, check_json

_MISSING = [m for m in ("onnx2tf", "tensorflow", "tf_keras") if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.mobile,
              pytest.mark.skipif(bool(_MISSING), reason=f"TF stack not installed: {', '.join(_MISSING)}")]


@pytest.mark.parametrize("name", ["lenet.onnx", "two_outputs.onnx"])
def test_tf_savedmodel_matches_the_reference(tmp_path, name):
    r = check_json(tmp_path, FIXTURES / name, "--targets", "server/tf", "--runs", "3")
    tf = by_id(r)["server/tf"]
    assert tf["status"] == "pass", tf
    assert tf["runtime"].startswith("tensorflow ")
    outs = tf["metrics"]["outputs"]
    assert set(outs) == {o["name"] for o in r["model"]["outputs"]}  # every output, mapped back by name
    assert all(o["max_abs"] < 1e-4 for o in outs.values())
    assert tf["artifact"]["format"] == "saved_model"
    if name == "lenet.onnx":
        # the SavedModel's size leaves out the float .tflite files kept beside it for the mobile targets
        # (with them it would be about 2.5x the model: a SavedModel holds the weights once)
        assert tf["artifact"]["size_bytes"] < 1.5 * r["model"]["size_bytes"]
        assert tf["details"]["layout"] == {"x": [0, 2, 3, 1]}  # NCHW fed channel-last, as onnx2tf made it


def test_a_mapping_without_signature_keys_still_finds_the_savedmodels_inputs(tmp_path):
    """A ``.tflite`` without a signature names no key for an input: the SavedModel's own signature is
    read then (the ONNX name's spelling, else the one input left), instead of refusing the model."""
    import copy

    import numpy as np

    from mobile_models import convert, reference
    from portability.core.errors import LoadError
    from portability.runtimes.tf_savedmodel import TfSavedModel

    model = FIXTURES / "lenet.onnx"
    art = convert(model, [("portability.converters.onnx2tf:SavedModelFromOnnx", {})], tmp_path / "cache")
    x = np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)
    want = reference(model, {"x": x})
    for key in (None, "not_a_key"):
        lost = copy.deepcopy(art)
        lost.meta["tflite_io"]["inputs"][0]["key"] = key
        rt = TfSavedModel()
        rt.load(lost)
        got = rt.infer({"x": x})
        assert set(got) == set(want) and all(np.allclose(got[k], want[k], atol=1e-4) for k in want)
    two = copy.deepcopy(art)  # two inputs with no key and nothing to tell them apart: refused in one line
    two.meta["tflite_io"]["inputs"] = [dict(two.meta["tflite_io"]["inputs"][0], key=None, onnx=n) for n in ("a", "b")]
    with pytest.raises(LoadError, match="no SavedModel signature input for ONNX input 'a'"):
        TfSavedModel().load(two)
