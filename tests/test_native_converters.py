"""Each native converter really runs on a fixture, and what it makes computes what the source computes
(within the tolerance of its variant): Keras -> SavedModel (model.export), SavedModel -> TFLite (fp32,
fp16, dynamic-range int8, full int8 calibrated), SavedModel -> ONNX (tf2onnx), SavedModel -> TF.js,
torch.export -> ONNX (dynamo and TorchScript exporters); a .tflite source against the Keras model it came from."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import FIXTURES
from portability.converters.base import ConvertContext
from portability.core.target import load_class
from portability.workers.cache import Cache
from portability.engine.plan import plan
from portability.sources import load_source_isolated
from portability.targets import registry

REG = registry()
NEEDS = {"keras": ("tensorflow", "keras"), "torch": ("torch", "onnxscript"), "tflite": ("ai_edge_litert",)}


def _need(*mods):
    missing = [m for m in mods if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


@pytest.fixture(scope="module")
def digits():
    z = np.load(FIXTURES / "digits_nhwc.npz")
    return z["x"][:40], z["y"][:40]


def run_target(info, tid: str, feeds: list[dict], tmp, via=None, cal=None):
    """Convert the source along the target's planned chain (through a cache), run its runtime on each feed."""
    t = REG[tid]
    cache = Cache(tmp / "cache")
    shapes = {s.name: list(feeds[0][s.name].shape) for s in info.inputs if any(d is None for d in s.shape)}
    ctx = ConvertContext(calibration=cal, calibration_source="dataset" if cal else None, signature=info.signature(),
                         input_shapes=shapes or None, timeout_s=600)
    art = info.artifact()
    for path, options in plan(info.format, t, via).steps:
        art, _ = cache.convert(load_class(path)(), art, options, ctx)
    rt = load_class(t.runtime)(t.options)
    rt.load(art)
    try:
        return art, [rt.infer(f) for f in feeds]
    finally:
        rt.close()


def _stack(outs, name):
    return np.concatenate([o[name] for o in outs])


@pytest.fixture(scope="module")
def keras_src(tmp_path_factory, digits):
    _need(*NEEDS["keras"])
    info = load_source_isolated(FIXTURES / "keras_cnn.keras")
    feeds = [{"image": digits[0][i:i + 1]} for i in range(len(digits[0]))]
    _, ref = run_target(info, "server/keras", feeds, tmp_path_factory.mktemp("keras"))
    return info, feeds, _stack(ref, "output_0")


def test_keras_export_savedmodel_runs_in_tensorflow(keras_src, tmp_path):
    info, feeds, ref = keras_src
    art, outs = run_target(info, "server/tf", feeds, tmp_path)
    assert art.meta["produced_by"] == "keras model.export"
    assert np.abs(_stack(outs, "output_0") - ref).max() < 1e-5


@pytest.mark.mobile
@pytest.mark.parametrize("tid,bound", [("mobile/tflite-fp32", 1e-5), ("mobile/tflite-fp16", 1e-2),
                                       ("mobile/tflite-dynint8", None), ("mobile/tflite-int8", None)])
def test_keras_tflite_variants_by_tensorflows_converter(keras_src, tmp_path, digits, tid, bound):
    _need(*NEEDS["tflite"])
    info, feeds, ref = keras_src
    art, outs = run_target(info, tid, feeds, tmp_path, cal={"image": digits[0]})
    assert "TFLiteConverter" in art.meta["produced_by"] and art.meta["tflite_io"]["inputs"][0]["to_tflite"] == [0, 1, 2, 3]
    got = _stack(outs, "output_0")
    if bound is not None:
        assert np.abs(got - ref).max() < bound
    assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.9
    if tid.endswith("-int8"):
        assert art.meta["tflite_io"]["inputs"][0]["dtype"] == "int8" and art.meta["calibration_source"] == "dataset"


def test_keras_to_onnx_by_tf2onnx(keras_src, tmp_path):
    info, feeds, ref = keras_src
    art, outs = run_target(info, "server/ort-cpu", feeds, tmp_path)
    assert "tf2onnx" in art.meta["produced_by"]
    assert np.abs(_stack(outs, "output_0") - ref).max() < 1e-5


def test_keras_to_tfjs_graph_model(keras_src, tmp_path):
    _need("tensorflowjs")
    info, _, _ = keras_src
    cache = Cache(tmp_path / "cache")
    ctx = ConvertContext(signature=info.signature(), timeout_s=600)
    art = info.artifact()
    for path, options in plan("keras", REG["web/tfjs-cpu"]).steps:
        art, _ = cache.convert(load_class(path)(), art, options, ctx)
    assert art.format == "tfjs" and art.path.name == "model.json" and any("Conv2D" in op for op in art.meta["ops"])
    assert art.meta["tfjs_io"]["inputs"][0] == {"onnx": "image", "key": "image", "node": "image", "shape": [-1, 28, 28, 1],
                                                "dtype": "float32", "to_tfjs": [0, 1, 2, 3]}


@pytest.mark.mobile
def test_tflite_source_computes_what_its_keras_model_does(keras_src, tmp_path):
    _need(*NEEDS["tflite"])
    _, feeds, ref = keras_src
    info = load_source_isolated(FIXTURES / "keras_cnn.tflite")
    assert info.format == "tflite" and [s.name for s in info.inputs] == ["image"]
    _, outs = run_target(info, "mobile/tflite-fp32", feeds, tmp_path)
    assert np.abs(_stack(outs, "output_0") - ref).max() < 1e-5


@pytest.fixture(scope="module")
def torch_src(tmp_path_factory, digits):
    _need(*NEEDS["torch"])
    info = load_source_isolated(FIXTURES / "torch_cnn.pt2")
    feeds = [{"input": digits[0][i:i + 1].transpose(0, 3, 1, 2).copy()} for i in range(len(digits[0]))]
    _, ref = run_target(info, "server/torch", feeds, tmp_path_factory.mktemp("torch"))
    return info, feeds, _stack(ref, "linear_1")


@pytest.mark.parametrize("via", [None, "OnnxFromTorchScript"])
def test_torch_export_to_onnx(torch_src, tmp_path, via, digits):
    info, feeds, ref = torch_src
    art, outs = run_target(info, "server/ort-cpu", feeds, tmp_path, via=via)
    assert f"dynamo={via is None}" in art.meta["produced_by"]
    assert np.abs(_stack(outs, "linear_1") - ref).max() < 1e-4
    assert (ref.argmax(1) == digits[1]).mean() > 0.8  # the fixture is a trained model


def test_a_source_output_name_an_inner_value_holds_is_given_to_the_output_alone(tmp_path):
    """A torch.export program names its output after its last FX node (``view_23``), and the exporter names
    inner values alike: renaming the graph output to it must not define the name twice."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from portability.converters.onnx_names import rename_io

    nodes = [helper.make_node("Relu", ["x"], ["view_23"]), helper.make_node("Neg", ["view_23"], ["out"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    sig = {"inputs": [{"name": "x"}], "outputs": [{"name": "view_23"}]}
    rename_io(path, sig)
    m = onnx.load(str(path))
    onnx.checker.check_model(m, full_check=True)
    assert [o.name for o in m.graph.output] == ["view_23"]
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    y = s.run(["view_23"], {"x": np.array([1.0, -2.0], np.float32)})[0]
    assert y.tolist() == [-1.0, 0.0]
