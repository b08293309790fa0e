"""A model that draws random numbers (an export left in training mode: its Dropout still drops) is named as
such: its outputs change from run to run, the reference's included, and the check says so."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import check_json


def dropout_model(path: Path, training: bool | None) -> Path:
    """x -> MatMul -> Dropout(ratio 0.5, training_mode given as a constant, or not given)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.eye(16, dtype=np.float32), "W"),
             numpy_helper.from_array(np.array(0.5, np.float32), "ratio")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"])]
    if training is None:
        nodes.append(helper.make_node("Dropout", ["h"], ["y"], name="drop"))
    else:
        nodes.append(helper.make_node("Constant", [], ["mode"], value=numpy_helper.from_array(np.array(training))))
        nodes.append(helper.make_node("Dropout", ["h", "ratio", "mode"], ["y"], name="drop"))
    g = helper.make_graph(nodes, "d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


@pytest.mark.parametrize("training, random", [(True, True), (False, False), (None, False)])
def test_only_a_dropout_in_training_mode_is_random(tmp_path, training, random):
    import onnx

    from portability.core.random_ops import random_nodes

    found = random_nodes(onnx.load(str(dropout_model(tmp_path / "m.onnx", training))))
    assert found == (("Dropout 'drop'",) if random else ())


def test_a_check_of_a_model_in_training_mode_says_its_outputs_are_random(tmp_path):
    model = dropout_model(tmp_path / "m" / "model.onnx", True)
    report = check_json(tmp_path, model, "--targets", "server/ort-cpu-noopt", "--runs", "0", expect_rc=None)
    assert report["model"]["random_ops"] == ["Dropout 'drop'"]
    assert any("draws random numbers (Dropout 'drop')" in n and "model.eval()" in n for n in report["notes"]), report["notes"]
    # the same model in inference mode: no such note, and the target agrees
    calm = check_json(tmp_path, dropout_model(tmp_path / "n" / "model.onnx", False), "--targets", "server/ort-cpu-noopt",
                      "--runs", "0")
    assert "random_ops" not in calm["model"] and not any("random" in n for n in calm["notes"])
