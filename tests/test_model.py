"""Model loading and validation: fixtures load; bad files and unsafe external data exit 2 with one line."""
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import FIXTURES, run_cli
from portability.core.errors import BadModel
from portability.core.model import load_model


def test_fixture_signatures():
    m = load_model(FIXTURES / "lenet.onnx")
    assert [(i.name, i.dtype, i.shape) for i in m.inputs] == [("x", "float32", (1, 1, 28, 28))]
    assert m.outputs[0].name == "logits" and m.opset == 18 and len(m.sha256) == 64
    d = load_model(FIXTURES / "mlp_dynamic.onnx")
    assert isinstance(d.inputs[0].shape[0], str)  # symbolic batch
    ids = load_model(FIXTURES / "int64_ids.onnx")
    assert ids.inputs[0].dtype == "int64" and ids.index_bounds == {"ids": 100}
    ext = load_model(FIXTURES / "external" / "mlp.onnx")
    assert ext.external_data == ("mlp.onnx.data",)
    assert ext.size_bytes > (FIXTURES / "external" / "mlp.onnx").stat().st_size


def _assert_exit2(model, *extra, needle: str):
    p = run_cli("check", str(model), "--runs", "0", *extra)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert needle in lines[0], lines[0]


def test_missing_file(tmp_path):
    _assert_exit2(tmp_path / "nope.onnx", needle="not found")


def test_empty_file(tmp_path):
    (tmp_path / "e.onnx").write_bytes(b"")
    _assert_exit2(tmp_path / "e.onnx", needle="empty")


def test_not_onnx(tmp_path):
    (tmp_path / "t.onnx").write_text("this is not a model\n" * 10)
    _assert_exit2(tmp_path / "t.onnx", needle="not")


def test_truncated_protobuf(tmp_path):
    raw = (FIXTURES / "lenet.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(raw[: len(raw) // 2])
    _assert_exit2(tmp_path / "cut.onnx", needle="ONNX")


def _tiny(nodes, inputs, outputs, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])


def test_invalid_graph(tmp_path):
    m = _tiny([helper.make_node("Add", ["x", "missing"], ["y"])], [X], [Y])
    onnx.save(m, tmp_path / "bad.onnx")
    _assert_exit2(tmp_path / "bad.onnx", needle="invalid ONNX model")


def test_unknown_opset(tmp_path):
    m = _tiny([helper.make_node("Relu", ["x"], ["y"])], [X], [Y], opset=999)
    onnx.save(m, tmp_path / "op.onnx")
    _assert_exit2(tmp_path / "op.onnx", needle="unknown ONNX opset 999")


def _external_model(tmp_path, location: str):
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    m = _tiny([helper.make_node("Add", ["x", "w"], ["y"])], [X], [Y], [w])
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir()
    path.write_bytes(m.SerializeToString())
    return path


@pytest.mark.parametrize("location", ["/etc/passwd", "../secret.bin", "sub/../../secret.bin"])
def test_external_data_escape_refused(tmp_path, location):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    path = _external_model(tmp_path, location)
    with pytest.raises(BadModel, match="refused"):
        load_model(path)
    _assert_exit2(path, needle="refused")


def test_external_data_symlink_escape_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    path = _external_model(tmp_path, "w.bin")
    os.symlink(tmp_path / "secret.bin", path.parent / "w.bin")
    with pytest.raises(BadModel, match="outside"):
        load_model(path)


def test_external_data_missing_and_truncated(tmp_path):
    path = _external_model(tmp_path, "w.bin")
    with pytest.raises(BadModel, match="missing"):
        load_model(path)
    (path.parent / "w.bin").write_bytes(b"\0" * 8)  # 8 of the 16 bytes the tensor needs
    with pytest.raises(BadModel, match="beyond the end"):
        load_model(path)
    (path.parent / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    assert load_model(path).external_data == ("w.bin",)


def test_external_data_model_runs_from_a_copy(tmp_path):
    folder = tmp_path / "ext"
    shutil.copytree(FIXTURES / "external", folder)
    p = run_cli("check", str(folder / "mlp.onnx"), "-t", "server/ort-cpu-noopt", "--runs", "0", "-q")
    assert p.returncode == 0, p.stderr


def test_model_without_inputs(tmp_path):
    c = helper.make_node("Constant", [], ["y"], value=numpy_helper.from_array(np.ones((1, 4), np.float32)))
    m = _tiny([c], [], [Y])
    m.ir_version = 8
    onnx.save(m, tmp_path / "const.onnx")
    _assert_exit2(tmp_path / "const.onnx", needle="no inputs")


def test_isolated_validation_gives_the_same_answer(tmp_path):
    from portability.sources.onnx import load_model_isolated

    for name in ("lenet.onnx", "int64_ids.onnx", "external/mlp.onnx"):
        assert load_model_isolated(FIXTURES / name) == load_model(FIXTURES / name)
    (tmp_path / "t.onnx").write_text("garbage")
    with pytest.raises(BadModel, match="not"):
        load_model_isolated(tmp_path / "t.onnx")
