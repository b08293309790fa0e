"""A TensorFlow (Flex) op in a ``.tflite`` file is that op's failure on every LiteRT runtime: LiteRT refuses
the file, and LiteRT.js, which runs the unresolved op silently and returns garbage, is refused it before it
runs — never a `drift` that calls the model wrong. The exact GELU, which onnx2tf alone leaves as a Flex
``Erf``, is converted as TFLite's built-in GELU, on every TFLite variant, int8 included."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import by_id, check_json


def _model(path, act: list[str], consts: dict[str, float] | None = None) -> None:
    """y = act(x · W): ``act`` names the nodes after the MatMul (``m`` in, ``y`` out)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = (np.random.default_rng(0).standard_normal((16, 16)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"])] + [helper.make_node(*n) for n in act]
    inits = [numpy_helper.from_array(w, "W")] + [numpy_helper.from_array(np.array(v, np.float32), k)
                                                 for k, v in (consts or {}).items()]
    g = helper.make_graph(nodes, "act", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


#: x · ½ (1 + erf(x / √2)) as the TorchScript exporter writes nn.GELU() (the dynamo exporter: ½ before x)
TORCHSCRIPT_GELU = [("Div", ["m", "sqrt2"], ["d"]), ("Erf", ["d"], ["e"]), ("Add", ["e", "one"], ["a"]),
                    ("Mul", ["m", "a"], ["p"]), ("Mul", ["p", "half"], ["y"])]
DYNAMO_GELU = [("Mul", ["m", "isqrt2"], ["d"]), ("Erf", ["d"], ["e"]), ("Add", ["one", "e"], ["a"]),
               ("Mul", ["half", "a"], ["p"]), ("Mul", ["m", "p"], ["y"])]
GELU_CONSTS = {"sqrt2": np.sqrt(2.0), "isqrt2": 1 / np.sqrt(2.0), "one": 1.0, "half": 0.5}


def test_custom_ops_are_read_from_the_flatbuffer(tmp_path):
    from conftest import FIXTURES

    from portability.runtimes.litert import custom_ops

    assert custom_ops(FIXTURES / "keras_cnn.tflite") == []  # built-in ops only
    (tmp_path / "bad.tflite").write_bytes(b"\x00" * 64)
    assert custom_ops(tmp_path / "bad.tflite") == []  # unreadable: nothing claimed, the runtime says the rest


@pytest.mark.parametrize("act", [TORCHSCRIPT_GELU, DYNAMO_GELU], ids=["torchscript", "dynamo"])
def test_the_exact_gelu_is_found_and_fused_to_the_same_numbers(tmp_path, act):
    import onnx
    import onnxruntime as ort

    from portability.converters.tflite_builtins import find, fuse_gelu

    _model(tmp_path / "gelu.onnx", act, GELU_CONSTS)
    assert len(find(onnx.load(tmp_path / "gelu.onnx"))) == 1
    assert fuse_gelu(tmp_path / "gelu.onnx", tmp_path / "fused.onnx", unfused=tmp_path / "u" / "model.onnx") == 1
    fused = onnx.load(tmp_path / "fused.onnx")
    assert [n.op_type for n in fused.graph.node] == ["MatMul", "Gelu"]
    x = {"x": np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32) * 3}
    want = ort.InferenceSession(str(tmp_path / "gelu.onnx")).run(None, x)[0]
    got = ort.InferenceSession(str(tmp_path / "fused.onnx")).run(None, x)[0]
    np.testing.assert_allclose(got, want, atol=1e-6)
    # the model as given is kept beside it, untouched
    assert [n.op_type for n in onnx.load(tmp_path / "u" / "model.onnx").graph.node] == ["MatMul"] + [a[0] for a in act]


def test_an_erf_that_is_no_gelu_is_not_fused(tmp_path):
    import onnx

    from portability.converters.tflite_builtins import find, fuse_gelu

    # x · (1 + erf(x / √2)) without the ½: not a GELU
    _model(tmp_path / "m.onnx", TORCHSCRIPT_GELU[:4] + [("Identity", ["p"], ["y"])], GELU_CONSTS)
    assert find(onnx.load(tmp_path / "m.onnx")) == []
    assert fuse_gelu(tmp_path / "m.onnx", tmp_path / "f.onnx") == 0 and not (tmp_path / "f.onnx").exists()


@pytest.mark.web
@pytest.mark.mobile
def test_a_flex_op_is_a_load_error_on_litert_and_litert_js(tmp_path):
    _model(tmp_path / "atan.onnx", [("Atan", ["m"], ["y"])])  # TFLite has no Atan built-in: FlexAtan
    r = check_json(tmp_path, tmp_path / "atan.onnx", "--targets", "mobile/tflite-fp32,web/litert-js,mobile/tflite-int8",
                   "--runs", "0", expect_rc=1)
    t = by_id(r)
    for tid in ("mobile/tflite-fp32", "web/litert-js"):
        assert t[tid]["status"] == "load-error", (tid, t[tid]["status"], t[tid]["error"], t[tid]["metrics"].get("outputs"))
        assert t[tid]["op"] == "FlexAtan" and "Flex" in t[tid]["error"], t[tid]
    # the int8 converter refuses it: its failure names the op too
    assert t["mobile/tflite-int8"]["status"] == "convert-error" and t["mobile/tflite-int8"]["op"] == "FlexAtan", t["mobile/tflite-int8"]


@pytest.mark.web
@pytest.mark.mobile
def test_the_exact_gelu_passes_on_every_tflite_variant_and_tfjs_and_says_how(tmp_path):
    _model(tmp_path / "gelu.onnx", TORCHSCRIPT_GELU, GELU_CONSTS)
    ids = ["mobile/tflite-fp32", "mobile/tflite-fp16", "mobile/tflite-dynint8", "mobile/tflite-int8", "web/litert-js",
           "web/tfjs-cpu", "server/tf"]
    r = check_json(tmp_path, tmp_path / "gelu.onnx", "--targets", ",".join(ids + ["mobile/coreml"]), "--runs", "0")
    t = by_id(r)
    for tid in ids:
        assert t[tid]["status"] == "pass", (tid, t[tid]["status"], t[tid]["error"])
    # Core ML Tools, which lacks TensorFlow's Erfc too, converts the SavedModel of the model as given
    assert t["mobile/coreml"]["status"] == "skipped" and "converted to Core ML" in t["mobile/coreml"]["error"], t["mobile/coreml"]
    assert any("exact GELU (Erf) converted as one GELU" in n for n in t["mobile/tflite-int8"]["notes"]), t["mobile/tflite-int8"]["notes"]
    assert any("TF.js lacks" in n for n in t["web/tfjs-cpu"]["notes"]), t["web/tfjs-cpu"]["notes"]


@pytest.mark.mobile
def test_localize_names_the_op_whose_flex_kernel_litert_lacks(tmp_path):
    """A load-error for a Flex op is localized on the node of that op, not on one downstream of it."""
    import json

    from conftest import run_cli

    _model(tmp_path / "m.onnx", [("Relu", ["m"], ["r"], "relu"), ("Atan", ["r"], ["a"], "atan"),
                                 ("Tanh", ["a"], ["y"], "tanh")])
    p = run_cli("localize", str(tmp_path / "m.onnx"), "--target", "mobile/tflite-fp32", "--out", str(tmp_path / "loc"))
    assert p.returncode in (0, 1), p.stderr[-2000:]
    doc = json.loads((tmp_path / "loc" / "localize.json").read_text())
    first = doc["first_divergence"]
    assert doc["mode"] == "error" and first["node"] == "atan" and first["op_type"] == "Atan", first
    assert "FlexAtan" in first["error"] and first["op_at_fault"], first
    assert "the op itself fails here" in p.stdout


def _embedding(path) -> None:
    """y = Embedding[ids] · W: an int64 token input, as every exported text model has."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["E", "ids"], ["e"], name="embed"), helper.make_node("MatMul", ["e", "W"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "emb", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4])],
                          [numpy_helper.from_array(rng.standard_normal((50, 16)).astype(np.float32), "E"),
                           numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def test_int64_inputs_are_taken_as_int32_with_a_cast_inside(tmp_path):
    import onnx
    import onnxruntime as ort

    from portability.converters.tflite_builtins import int32_inputs

    _embedding(tmp_path / "m.onnx")
    assert int32_inputs(tmp_path / "m.onnx", tmp_path / "i32.onnx") == ["ids"]
    m = onnx.load(tmp_path / "i32.onnx")
    assert m.graph.input[0].name == "ids" and m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT32
    ids = np.random.default_rng(1).integers(0, 50, (1, 8))
    want = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"ids": ids})[0]
    got = ort.InferenceSession(str(tmp_path / "i32.onnx")).run(None, {"ids": ids.astype(np.int32)})[0]
    np.testing.assert_array_equal(got, want)
    assert int32_inputs(tmp_path / "i32.onnx", tmp_path / "again.onnx") == [] and not (tmp_path / "again.onnx").exists()


@pytest.mark.web
@pytest.mark.mobile
def test_a_token_input_runs_on_litert_js_and_calibrates_int8(tmp_path):
    """LiteRT.js takes no int64 tensor: the .tflite's token input is int32, and said to be."""
    _embedding(tmp_path / "emb.onnx")
    r = check_json(tmp_path, tmp_path / "emb.onnx", "--targets", "web/litert-js,mobile/tflite-fp32,mobile/tflite-int8",
                   "--runs", "0")
    t = by_id(r)
    for tid in ("web/litert-js", "mobile/tflite-fp32", "mobile/tflite-int8"):
        assert t[tid]["status"] == "pass", (tid, t[tid]["status"], t[tid]["error"])
    assert any("the int64 input ids taken as int32" in n for n in t["web/litert-js"]["notes"]), t["web/litert-js"]["notes"]
