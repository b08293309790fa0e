"""``check --fix`` and ``portability fix``: a target that fails as converted by default passes under a
documented alternative, which is named with the setting that selects it; that setting, used as the report
says, makes the check pass."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import by_id, check_json, run_cli

pytestmark = pytest.mark.mobile


def atan(tmp_path) -> str:
    """A layer then Atan: onnx2tf turns it into TensorFlow's Atan, which TFLite has no built-in for and runs
    only as a Flex (select TF) op; its -rtpo builds it from built-ins."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"), helper.make_node("Atan", ["h"], ["y"], name="atan")]
    g = helper.make_graph(nodes, "atan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [numpy_helper.from_array((rng.standard_normal((8, 8)) * 0.5).astype(np.float32), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "atan.onnx"
    onnx.save(m, path)
    return str(path)


def test_check_fix_finds_the_onnx2tf_option_that_makes_a_flex_op_load_and_pass(tmp_path):
    model = atan(tmp_path)
    r = check_json(tmp_path, model, "--targets", "mobile/tflite-fp32", "--runs", "0", "--fix", expect_rc=1)
    t = by_id(r)["mobile/tflite-fp32"]
    assert t["status"] != "pass"  # as converted by default: the Atan
    # the failure itself names the route that fixes it
    assert t["op"] == "FlexAtan" and t["hint"].startswith("--fix retries the conversion with onnx2tf -rtpo Atan"), t["hint"]
    fix = t["details"]["fix"]
    assert fix["passing"] is not None, fix
    assert fix["passing"]["alternative"].startswith("onnx2tf -rtpo") and "Atan" in fix["passing"]["option"]
    assert fix["tried"][-1]["status"] == "pass"
    # the setting as the report gives it, in a settings file: the target now passes
    (tmp_path / "portability.toml").write_text(fix["passing"]["option"] + "\n")
    (tmp_path / "ok").mkdir()
    p = run_cli("check", model, "--targets", "mobile/tflite-fp32", "--runs", "0", "--config",
                str(tmp_path / "portability.toml"), "--json", str(tmp_path / "ok" / "r.json"), "--no-history")
    assert p.returncode == 0, p.stderr[-2000:]
    ok = by_id(json.loads((tmp_path / "ok" / "r.json").read_text()))["mobile/tflite-fp32"]
    assert ok["status"] == "pass"  # the same target that failed as converted by default


def test_fix_says_nothing_to_fix_for_a_passing_target(tmp_path):
    p = run_cli("fix", atan(tmp_path), "--target", "server/ort-cpu-noopt", "--json", str(tmp_path / "f.json"))
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "f.json").read_text())
    assert doc["status"] == "pass" and doc["tried"] == [] and doc["passing"] is None


def test_onnx2tf_options_outside_the_list_are_refused(tmp_path):
    (tmp_path / "portability.toml").write_text('[converter_options.SavedModelFromOnnx]\nargs = ["-o", "/tmp/elsewhere"]\n')
    (tmp_path / "r").mkdir()
    r = check_json(tmp_path / "r", atan(tmp_path), "--targets", "mobile/tflite-fp32", "--runs", "0", "--config",
                   str(tmp_path / "portability.toml"), expect_rc=1)
    t = by_id(r)["mobile/tflite-fp32"]
    assert t["status"] == "convert-error" and "onnx2tf option -o is not one a check may add" in t["error"]


def test_the_alternatives_follow_the_route_and_the_model():
    """Which alternatives apply: onnx2tf's only on an onnx2tf route, -rtpo with the model's own ops, -dgc only
    for a model with convolutions, ONNX Runtime's levels for its runtimes, ONNX for a route that avoids it,
    the engine's other backends last."""
    from portability.explain.fix import alternatives

    tfl = [a.name.split(" (")[0] for a in alternatives(["OnnxFromOnnx", "SavedModelFromOnnx", "TfliteFromSavedModel"],
                                                       "portability.runtimes.litert:LiteRt", {"MatMul", "Erf"}, ["x"], "mobile/tflite-fp32")]
    assert tfl == ["onnx2tf -rtpo Erf", "onnx2tf -nuo", "onnx2tf -ebu", "onnx2tf -kat", "onnx2tf -ofgd", "onnx2tf -agj"]
    web = alternatives(["OnnxFromOnnx"], "portability.runtimes.ort_web:OrtWeb", {"Conv"}, ["x"], "web/ort-webgpu",
                       siblings=("web/ort-wasm",))
    assert [a.settings for a in web] == [{"runtime_options": {"web/ort-webgpu": {"graph_optimization": "basic"}}},
                                         {"runtime_options": {"web/ort-webgpu": {"graph_optimization": "disabled"}}},
                                         {"target": "web/ort-wasm"}]
    keras = alternatives(["KerasFromKeras", "SavedModelFromKeras", "TfliteFromSavedModel"], "portability.runtimes.litert:LiteRt",
                         set(), [], "mobile/tflite-fp32", source="keras")
    assert [a.settings for a in keras] == [{"via": "onnx"}]
