"""Inputs: synthesized (seeded, dtype-aware), --shape, --inputs and --dataset, with exit 2 on bad data."""
import numpy as np
import pytest

from conftest import FIXTURES, check_json, run_cli
from portability.core import inputs as inp
from portability.core.errors import BadInput
from portability.core.model import load_model


def test_synthesized_is_seeded_and_dtype_aware():
    m = load_model(FIXTURES / "int64_ids.onnx")
    shapes, warnings = inp.resolve_shapes(m, {})
    a = inp.synthesize(m, shapes, 4, seed=3).arrays["ids"]
    b = inp.synthesize(m, shapes, 4, seed=3).arrays["ids"]
    assert a.dtype == np.int64 and a.shape == (4, 1, 16) and not warnings
    assert np.array_equal(a, b)
    assert a.min() >= 0 and a.max() < 100 and a.max() >= 50  # spans the embedding table's rows
    f = inp.synthesize(load_model(FIXTURES / "lenet.onnx"), {"x": (1, 1, 28, 28)}, 2, seed=0, value_range=(-2, 2)).arrays["x"]
    assert f.dtype == np.float32 and -2 <= f.min() < -1 and 1 < f.max() <= 2


def test_dynamic_dims_default_with_warning_or_from_shape_flag():
    m = load_model(FIXTURES / "mlp_dynamic.onnx")
    shapes, warnings = inp.resolve_shapes(m, {})
    assert shapes["x"] == (1, 1, 28, 28) and "dynamic" in warnings[0]
    given = inp.parse_shapes(["x=4x1x28x28"], m)
    assert inp.resolve_shapes(m, given) == ({"x": (4, 1, 28, 28)}, [])
    with pytest.raises(Exception, match="fixed shape"):
        inp.parse_shapes(["x=4x1x27x28"], m)


def test_dynamic_batch_model_checks_with_shape(tmp_path):
    r = check_json(tmp_path, FIXTURES / "mlp_dynamic.onnx", "--shape", "x=3x1x28x28", "-t", "server/ort-cpu-noopt", "--runs", "3")
    assert r["inputs"]["shapes"]["x"] == [3, 1, 28, 28]
    assert all(t["status"] in ("pass", "skipped") for t in r["targets"])
    r = check_json(tmp_path, FIXTURES / "mlp_dynamic.onnx", "-t", "server/ort-cpu-noopt", "--runs", "3")
    assert any("dynamic" in n for n in r["notes"])


def test_inputs_file_used_as_given(tmp_path):
    x = np.random.default_rng(1).random((2, 1, 8), dtype=np.float32)  # a stack of two batches
    np.savez(tmp_path / "in.npz", x=x)
    r = check_json(tmp_path, FIXTURES / "two_outputs.onnx", "--inputs", str(tmp_path / "in.npz"), "-t", "server/ort-cpu-noopt", "--runs", "2")
    assert r["inputs"]["source"] == "file" and r["inputs"]["batches"] == 2
    assert set(r["targets"][1]["metrics"]["outputs"]) == {"probs", "features"}


@pytest.mark.parametrize("arrays, needle", [
    ({"nope": np.zeros((1, 8), np.float32)}, "no array for input 'x'"),
    ({"x": np.zeros((1, 9), np.float32)}, "input 'x' has shape [1, 9], expected [1, 8]"),
    ({"x": np.zeros((1, 8), np.int32)}, "input 'x' has dtype int32, expected float32"),
    ({"x": np.zeros((1, 8), np.float32), "extra": np.zeros(1)}, "array 'extra' matches no model input"),
])
def test_bad_inputs_file_exits_2_naming_the_input(tmp_path, arrays, needle):
    np.savez(tmp_path / "in.npz", **arrays)
    p = run_cli("check", str(FIXTURES / "two_outputs.onnx"), "--inputs", str(tmp_path / "in.npz"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert needle in p.stderr, p.stderr


def test_pickled_npz_refused(tmp_path):
    np.savez(tmp_path / "evil.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(BadInput, match="pickled data is refused"):
        inp.from_file(load_model(FIXTURES / "two_outputs.onnx"), tmp_path / "evil.npz", {})


def test_not_an_npz(tmp_path):
    (tmp_path / "x.npz").write_text("hello")
    p = run_cli("check", str(FIXTURES / "two_outputs.onnx"), "--inputs", str(tmp_path / "x.npz"))
    assert p.returncode == 2 and "not a readable .npz" in p.stderr


def test_dataset_gives_accuracy(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--dataset", str(FIXTURES / "digits.npz"), "--samples", "100", "-t", "server/ort-cpu-noopt", "--runs", "5")
    ref = r["targets"][0]
    assert r["inputs"]["source"] == "dataset" and r["inputs"]["samples"] == 80  # the last 20 held out to calibrate
    assert ref["metrics"]["accuracy"] > 0.9  # a trained LeNet on held-out digits
    noopt = {t["id"]: t for t in r["targets"]}["server/ort-cpu-noopt"]
    assert noopt["metrics"]["accuracy_delta"] == 0.0


@pytest.mark.parametrize("arrays, needle", [
    ({"x": np.zeros((3, 1, 28, 28), np.float32)}, "no 'y' array"),
    ({"x": np.zeros((3, 1, 28, 28), np.float32), "y": np.zeros(4, np.int64)}, "has 3 samples but y has 4"),
    ({"x": np.zeros((3, 28, 28), np.float32), "y": np.zeros(3, np.int64)}, "samples have shape [28, 28], expected [1, 28, 28]"),
    ({"x": np.zeros((3, 1, 28, 28), np.float32), "y": np.zeros(3, np.float32)}, "integer class labels"),
    ({"x": np.float32(3), "y": np.zeros(3, np.int64)}, "has 0 samples but y has 3"),
])
def test_bad_dataset_exits_2(tmp_path, arrays, needle):
    np.savez(tmp_path / "d.npz", **arrays)
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--dataset", str(tmp_path / "d.npz"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert needle in p.stderr, p.stderr


def test_npz_claiming_huge_arrays_is_refused_from_its_header(tmp_path):
    import io
    import zipfile

    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as z:
        z.writestr("x.npy", b.getvalue() + bytes(16))
    p = run_cli("check", str(FIXTURES / "two_outputs.onnx"), "--inputs", str(tmp_path / "huge.npz"))
    assert p.returncode == 2 and "GiB" in p.stderr and "Traceback" not in p.stderr


def _transformer_like(path, via="Cast"):
    """input_ids reach a 50-row embedding through ``via`` (not directly); attention_mask and token_type_ids
    are added in as floats."""
    from onnx import TensorProto, helper, numpy_helper

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    types = helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])
    emb = numpy_helper.from_array(np.random.default_rng(0).random((50, 4), dtype=np.float32), "emb")
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
    first = (helper.make_node("Cast", ["input_ids"], ["ids2"], to=TensorProto.INT32) if via == "Cast"
             else helper.make_node("Reshape", ["input_ids", "shape"], ["ids2"]))
    nodes = [first, helper.make_node("Gather", ["emb", "ids2"], ["e"]),
             helper.make_node("Add", ["attention_mask", "token_type_ids"], ["s"]),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["sf", "axes"], ["su"]),
             helper.make_node("Add", ["e", "su"], ["y"])]
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    graph = helper.make_graph(nodes, "t", [ids, mask, types], [out], [emb, shape, axes])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx_model.ir_version = 8
    import onnx

    onnx.save(onnx_model, path)
    return path


@pytest.mark.parametrize("via", ["Cast", "Reshape"])
def test_index_bounds_follow_casts_and_reshapes(tmp_path, via):
    m = load_model(_transformer_like(tmp_path / "t.onnx", via))
    assert m.index_bounds == {"input_ids": 50}


def test_roles_from_names_fit_the_inputs(tmp_path):
    from portability.core.model import ModelInfo, TensorSpec

    m = load_model(_transformer_like(tmp_path / "t.onnx"))
    feeds = inp.synthesize(m, {n: (2, 8) for n in ("input_ids", "attention_mask", "token_type_ids")}, 3, seed=0)
    mask, types, ids = (feeds.arrays[n] for n in ("attention_mask", "token_type_ids", "input_ids"))
    assert mask.dtype == types.dtype == ids.dtype == np.int64
    rows = mask.reshape(6, 8)
    assert set(np.unique(mask)) == {0, 1} and rows[0::2].all() and (rows[1::2, :6] == 1).all() and not rows[1::2, 6:].any()
    assert (types[..., :4] == 0).all() and (types[..., 4:] == 1).all()
    assert ids.min() >= 0 and ids.max() < 50 and ids.max() >= 10
    assert any("'attention_mask' read as an attention mask" in w and "--inputs" in w for w in feeds.warnings)
    spec = (TensorSpec("position_ids", "int32", ("batch", "seq")), TensorSpec("input_values", "float32", ("batch", "samples")),
            TensorSpec("audio", "float32", ("batch", "samples")))
    m2 = ModelInfo(path=tmp_path, sha256="", size_bytes=0, opset=None, producer="", inputs=spec, outputs=())
    shapes, warnings = inp.resolve_shapes(m2, {"position_ids": (1, 5)})
    assert shapes["input_values"] == (1, 16000) and any("16000 Hz" in w for w in warnings)
    pos = inp.synthesize(m2, shapes, 2, seed=0).arrays["position_ids"]
    assert pos.dtype == np.int32 and (pos == np.arange(5)).all()
    import dataclasses

    assert inp.resolve_shapes(dataclasses.replace(m2, sample_rate=8000), {})[0]["audio"] == (1, 8000)


def test_transformer_like_model_checks_with_roles_noted(tmp_path):
    r = check_json(tmp_path, _transformer_like(tmp_path / "t.onnx", "Reshape"), "-t", "server/ort-cpu-noopt", "--runs", "2")
    assert all(t["status"] in ("pass", "skipped") for t in r["targets"]), r["targets"]
    for name, role in (("input_ids", "token ids"), ("attention_mask", "an attention mask"), ("token_type_ids", "token type ids")):
        assert any(f"'{name}' read as {role}" in n for n in r["notes"]), r["notes"]
