"""What a new user sees on models that are not the fixtures: errors that name the cause, statuses that say
what happened, no pass without evidence. Each case is a model built here, the smallest that shows it."""
import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper

from conftest import by_id, check_json


def _unary(tmp_path, op: str, opset: int, node_name: str = "", low: float = -1.0) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name=node_name)], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    path = tmp_path / f"{op.lower()}.onnx"
    onnx.save(m, path)
    return str(path)


def test_a_failed_onnx2tf_conversion_says_the_converters_own_error_and_no_invented_node(tmp_path):
    """onnx2tf converts Acos to TensorFlow's Acos, which TFLite has no kernel for: the one line is that, with
    the op, not onnx2tf's INFO log; the node has no name in the graph, so none is given."""
    r = check_json(tmp_path, _unary(tmp_path, "Acos", 13), "--targets", "mobile/tflite-fp32", "--runs", "0",
                   expect_rc=1)
    t = by_id(r)["mobile/tflite-fp32"]
    assert t["status"] == "convert-error"
    assert t["error"].startswith("onnx2tf failed (exit 1) at Acos: "), t["error"]
    assert "TFLite has no built-in kernel for Acos" in t["error"] and "INFO" not in t["error"]
    assert "node" not in t["error"] and t["op"] == "Acos" and t["node"] is None
    assert len(t["error"]) < 450


def test_nan_on_both_sides_is_no_agreement(tmp_path):
    """Sqrt of negative inputs is NaN on every runtime: the same NaN on both sides proves nothing."""
    model = _unary(tmp_path, "Sqrt", 13)
    r = check_json(tmp_path, model, "--targets", "server/ort-cpu-noopt", "--input-range", "-1,1", "--runs", "0",
                   expect_rc=1)
    t = by_id(r)["server/ort-cpu-noopt"]
    assert t["status"] == "drift" and t["metrics"]["outputs"]["y"]["nonfinite"] > 0
    assert any("NaN/Inf values, on both sides: no evidence of agreement" in b for b in t["breaches"]), t["breaches"]
    ok = check_json(tmp_path, model, "--targets", "server/ort-cpu-noopt", "--input-range", "0,1", "--runs", "0")
    assert by_id(ok)["server/ort-cpu-noopt"]["status"] == "pass"  # defined inputs: no NaN, a pass


def test_nan_inputs_given_by_the_user_are_said(tmp_path):
    model = _unary(tmp_path, "Relu", 13)
    x = np.zeros((3, 1, 4), np.float32)
    x[1, 0, 2] = np.nan
    np.savez(tmp_path / "in.npz", x=x)
    r = check_json(tmp_path, model, "--targets", "server/ort-cpu-noopt", "--inputs", str(tmp_path / "in.npz"),
                   "--runs", "0", expect_rc=None)
    assert any("input 'x' holds 1 NaN/Inf values (as given)" in n for n in r["notes"]), r["notes"]


def test_a_model_quantized_already_is_judged_as_quantized_models_are(tmp_path):
    """ONNX Runtime's dynamic quantization of the MLP fixture (DynamicQuantizeLinear, MatMulInteger): every
    target but the reference gets a quantized model's bounds, and the report says why."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from conftest import FIXTURES

    m = onnx.load(FIXTURES / "mlp.onnx")
    del m.graph.value_info[:]  # stale shapes the quantizer's own shape inference refuses
    onnx.save(m, tmp_path / "mlp.onnx")
    quantize_dynamic(tmp_path / "mlp.onnx", tmp_path / "mlp_q.onnx", weight_type=QuantType.QInt8)
    r = check_json(tmp_path, tmp_path / "mlp_q.onnx", "--targets", "server/ort-cpu-noopt,web/ort-wasm", "--runs", "0",
                   "--cosine", "0.9995")
    assert r["model"]["quantized_ops"] == ["DynamicQuantizeLinear", "MatMulInteger"]
    t = by_id(r)
    assert t["server/ort-cpu"]["thresholds"]["max_abs"] == 1e-4  # the reference is the reference
    for tid in ("server/ort-cpu-noopt", "web/ort-wasm"):
        thr = t[tid]["thresholds"]
        assert thr["max_abs"] is None and thr["top1_agreement"] == 0.95, (tid, thr)
        assert thr["cosine"] == 0.9995  # the user's bound still wins
        assert t[tid]["status"] == "pass"
    assert any(n.startswith("the model is quantized already (dynamic: DynamicQuantizeLinear, MatMulInteger)")
               for n in r["notes"]), r["notes"]
    plain = check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "server/ort-cpu-noopt", "--runs", "0")
    assert "quantized_ops" not in plain["model"] and by_id(plain)["server/ort-cpu-noopt"]["thresholds"]["max_abs"] == 1e-4


def test_a_tfjs_model_that_loads_and_fails_when_it_runs_is_a_run_error():
    """A kernel missing at the first execution is a run-error naming the op; at load, a load-error."""
    from portability.core.errors import LoadError, RunError
    from portability.runtimes.tfjs import Tfjs

    rt = Tfjs({"backend": "wasm"})
    run = rt.op_error("inference: Kernel 'HardSwish' not registered for backend 'wasm'", RunError)
    assert isinstance(run, RunError) and run.op == "HardSwish"
    load = rt.op_error("Tensorflow Op is not supported: DenseBincount", LoadError)
    assert isinstance(load, LoadError) and load.op == "DenseBincount"


def test_a_grouped_convolution_tfjs_cannot_run_names_the_conv_and_the_route_that_splits_it():
    """wav2vec2's positional convolution (groups 2) on TF.js: conv2d fails at run time; the ONNX op it computes is
    named, and the hint names onnx2tf's -dgc (which ``--fix`` finds making it pass: docs/transformers.md)."""
    from portability.converters.registry import fix_hint
    from portability.core.errors import RunError
    from portability.runtimes.tfjs import Tfjs

    err = Tfjs({"backend": "cpu"}).op_error("inference: Error in conv2d: depth of input (32) must match input depth "
                                            "for filter 16.", RunError)
    assert isinstance(err, RunError) and err.op == "Conv"
    hint = fix_hint(err.op, ["OnnxFromOnnx", "SavedModelFromOnnx", "TfjsFromSavedModel"])
    assert hint and "onnx2tf -dgc" in hint
    assert fix_hint("Conv", ["OnnxFromOnnx", "OrtFromOnnx"]) is None  # no converter of that route declares one


def test_a_reference_failing_on_synthesized_inputs_says_what_to_give(tmp_path):
    """A Reshape whose target shape is an input: made-up integers are not a shape it takes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])
    s = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], "g", [x, s], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "reshape.onnx")
    r = check_json(tmp_path, tmp_path / "reshape.onnx", "--targets", "server/ort-cpu-noopt", "--runs", "0", expect_rc=1)
    ref = r["targets"][0]
    assert ref["status"] == "run-error"
    assert ref["hint"] == "give real inputs: --inputs FILE.npz with one array per input (x, shape)"
    assert any(n.startswith("the reference failed on inputs this check synthesized (floats uniform in [0, 1), "
                            "integers in [0, 10)") for n in r["notes"]), r["notes"]
    np.savez(tmp_path / "in.npz", x=np.ones((1, 6), np.float32), shape=np.array([2, 3], np.int64))
    ok = check_json(tmp_path, tmp_path / "reshape.onnx", "--targets", "server/ort-cpu-noopt", "--runs", "0",
                    "--inputs", str(tmp_path / "in.npz"))
    assert ok["passed"] and not any("synthesized" in n for n in ok["notes"])


def test_an_image_of_dynamic_size_takes_the_size_the_model_says_else_224(tmp_path):
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, "h", "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, 1, 1])
    g = helper.make_graph([helper.make_node("GlobalAveragePool", ["images"], ["y"])], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "plain.onnx")
    helper.set_model_props(m, {"imgsz": "[640, 480]"})  # as Ultralytics' exporter writes it
    onnx.save(m, tmp_path / "sized.onnx")
    for name, hw, why in (("plain", [224, 224], "a common image size"), ("sized", [640, 480], "metadata 'imgsz'")):
        r = check_json(tmp_path, tmp_path / f"{name}.onnx", "--targets", "server/ort-cpu-noopt", "--runs", "0")
        assert r["inputs"]["shapes"]["images"] == [1, 3] + hw
        assert any(f"dynamic height and width: using {hw[0]}x{hw[1]}" in n and why in n for n in r["notes"]), r["notes"]


def test_a_slow_target_compares_fewer_batches_and_says_so(tmp_path):
    """A target whose correctness batches would overrun its budget (emulators and software GPU adapters
    have one: ``SLOW_SAMPLE_BUDGET_S``) compares the first batches only, against the reference's same
    batches and labels."""
    from conftest import FIXTURES

    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "test/ort-cpu-tiny-budget", "--dataset",
                   str(FIXTURES / "digits.npz"), "--samples", "64", "--runs", "0", "--markdown", str(tmp_path / "r.md"),
                   env={"PORTABILITY_PLUGINS": "doubles"})
    ref, t = r["targets"][0], by_id(r)["test/ort-cpu-tiny-budget"]
    # the first inference alone overran the budget: it is the one batch compared (no second to learn the pace)
    assert t["status"] == "pass" and t["details"]["samples"]["batches"] == 1
    assert t["details"]["samples"]["of"] == r["inputs"]["batches"] > 2 and "pace_ms" in t["details"]["samples"]
    assert t["metrics"]["accuracy_delta"] in (None, 0.0)  # the reference's accuracy on the same batches
    assert any(n.startswith(f"compared on 1 of {r['inputs']['batches']} input batches") for n in t["notes"]), t["notes"]
    assert "samples" not in ref["details"]
    # the table does not set a subset's accuracy beside the reference's as if comparable: it names the subset
    row = next(line for line in (tmp_path / "r.md").read_text().splitlines() if "test/ort-cpu-tiny-budget" in line)
    acc = t["metrics"]["accuracy"]
    assert f"{acc:.4f} (+0.0000 on 1/{r['inputs']['batches']})" in row, row


def _shape_branch_model(tmp_path) -> str:
    """y = x where x has 32 columns, else x + 64 // (columns - 32): at 32 columns only the first branch
    runs, but with the dims fixed ONNX Runtime's constant folding builds the other branch's integer
    division by zero and fails (as a VAD model's sample-rate branches did)."""
    from onnx import numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T"])
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "then", [],
                             [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Div", ["c64", "d"], ["q"]), helper.make_node("Cast", ["q"], ["qf"], to=TensorProto.FLOAT),
                               helper.make_node("Add", ["x", "qf"], ["b"])], "else", [],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["t"], axis=0),
             helper.make_node("Sub", ["t", "c32"], ["d"]), helper.make_node("Equal", ["t", "c32"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("one", 1), ("c32", 32), ("c64", 64))]
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T"])], consts)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "branches.onnx"
    onnx.save(m, path)
    return str(path)


def test_ort_mobile_converts_what_the_raw_converter_converts(tmp_path):
    """The ORT converter with its defaults converts the model as given; with the check's shapes fixed it
    fails. The target converts the model as given then, runs it, and says why its dims were kept."""
    import subprocess
    import sys

    model = _shape_branch_model(tmp_path)
    raw = subprocess.run([sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort", model, "--output_dir",
                          str(tmp_path / "raw")], capture_output=True, text=True)
    assert raw.returncode == 0, raw.stdout[-500:]
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).random((2, 1, 32), dtype=np.float32))
    r = check_json(tmp_path, model, "--targets", "mobile/ort-mobile", "--inputs", str(tmp_path / "in.npz"), "--runs", "0")
    t = by_id(r)["mobile/ort-mobile"]
    assert t["status"] == "pass", (t["status"], t.get("error"))
    assert t["details"]["shapes_not_fixed"]["shapes"] == {"x": [1, 32]}
    assert "Integer division by zero" in t["details"]["shapes_not_fixed"]["because"]
    assert "fixed_shapes" not in t["details"]
    assert any(n.startswith("converted with its dynamic dims kept") for n in t["notes"]), t["notes"]


def test_the_ort_converters_failure_line_is_its_exception_not_its_shape_warnings():
    from portability.converters.ort_format import failure_line

    log = ("MergeShapeInfo: Error merging shape info for output. 'y' source:{1,64} target:{1,32}. Falling back to "
           "lenient merge.\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
           "onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : Load model failed: "
           "/onnxruntime_src/onnxruntime/core/graph/graph.cc:1234 void onnxruntime::Graph::X() Node (n) bad\n")
    assert failure_line(log) == "Load model failed: Node (n) bad"


def test_a_target_too_slow_for_the_robustness_samples_skips_robustness_and_says_why(tmp_path):
    """With --robustness, a slow target that compared fewer clean samples than the robustness pass perturbs
    runs none of the perturbed inputs (nothing of its own to compare them with; on a software GPU they
    would outlast its run limit): its correctness stands, its robustness says why it is missing. The
    reference and a fast target measure robustness as before."""
    from conftest import FIXTURES

    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "server/ort-cpu-noopt,test/ort-cpu-tiny-budget",
                   "--dataset", str(FIXTURES / "digits.npz"), "--samples", "32", "--runs", "0", "--robustness",
                   "--robustness-samples", "8", env={"PORTABILITY_PLUGINS": "doubles"})
    t, fast = by_id(r)["test/ort-cpu-tiny-budget"], by_id(r)["server/ort-cpu-noopt"]
    assert t["status"] == "pass" and t["details"]["samples"]["batches"] == 1
    rob = t["metrics"]["robustness"]
    assert rob["available"] is False and rob["reason"].startswith("not measured: one inference takes ")
    assert "compared 1 of the 8 samples the robustness pass perturbs" in rob["reason"], rob["reason"]
    assert fast["metrics"]["robustness"]["available"] is True and fast["metrics"]["robustness"]["samples"] == 8
    assert r["targets"][0]["metrics"]["robustness"]["available"] is True
    # every sample compared, but the perturbed inputs would take over half the run time limit at its pace
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "test/ort-cpu-slow", "--dataset",
                   str(FIXTURES / "digits.npz"), "--samples", "16", "--runs", "0", "--robustness",
                   "--robustness-samples", "8", env={"PORTABILITY_PLUGINS": "doubles"})
    t = by_id(r)["test/ort-cpu-slow"]
    assert t["status"] == "pass" and "samples" not in t["details"], t
    rob = t["metrics"]["robustness"]
    assert rob["available"] is False and "over half of this target's 4 s run time limit" in rob["reason"], rob


def test_the_tfjs_converter_failure_names_the_ops_not_the_font_library():
    from portability.converters.tfjs import _failure_lines

    log = ("Fontconfig error: Cannot load default config file: No such file: (null)\n"
           "I0000 00:00:1795760229.988532 18163 port.cc:153] oneDNN custom operations are on.\n"
           "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
           "ValueError: Unsupported Ops in the model after optimization\n_MklLayerNorm\n")
    assert _failure_lines(log) == ["ValueError: Unsupported Ops in the model after optimization", "_MklLayerNorm"]


def test_the_tfjs_converter_runs_without_onednn_rewrites(monkeypatch, tmp_path):
    """TensorFlow's oneDNN rewrites fuse ops into ones no TF.js backend has (``_MklLayerNorm``): the converter
    runs with them off."""
    from portability.converters import tfjs

    seen = {}
    monkeypatch.setattr(tfjs, "run_tool", lambda cmd, what, timeout, **env: seen.update(env) or
                        type("P", (), {"returncode": 1, "stdout": "ValueError: boom"})())
    monkeypatch.setattr(tfjs, "require", lambda *a, **k: None)
    from portability.core.artifact import Artifact
    from portability.core.errors import ConvertError

    src = Artifact(path=tmp_path / "saved_model.pb", format="saved_model", sha256="", meta={})
    with pytest.raises(ConvertError, match="boom"):
        tfjs.TfjsFromSavedModel().convert(src, tmp_path / "out", {"quantize": None}, type("C", (), {"timeout_s": 5})())
    assert seen.get("TF_ENABLE_ONEDNN_OPTS") == "0"


def test_an_onnx2tf_failure_at_a_node_it_renamed_names_the_source_node_and_its_op(tmp_path):
    """onnx2tf names a node it rewrote as a workaround ``wa/<name>`` in its ERROR lines (T5's relative-position
    ``Where``); the failure names the source graph's node and its op, from the INFO line that started it."""
    from portability.converters.onnx2tf_log import failure

    g = helper.make_graph([helper.make_node("Where", ["c", "x", "y"], ["z"], name="/m/attn/Where_1")], "g",
                          [helper.make_tensor_value_info(n, TensorProto.BOOL if n == "c" else TensorProto.FLOAT, [2])
                           for n in ("c", "x", "y")], [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g), str(path))
    log = "\n".join(["\x1b[32mINFO:\x1b[0m \x1b[35monnx_op_type\x1b[0m: Where\x1b[35m onnx_op_name\x1b[0m: /m/attn/Where_1",
                     "\x1b[31mERROR:\x1b[0m The trace log is below.",
                     'ValueError: Exception encountered when calling layer "tf.where" (type TFOpLambda).',
                     "\x1b[31mERROR:\x1b[0m onnx_op_name: wa/m/attn/Where_1"])
    what, op, node = failure(log, path)
    assert (op, node) == ("Where", "/m/attn/Where_1") and what.startswith("ValueError: Exception encountered")


def test_a_torch_onnx_failure_says_its_cause_and_the_op_it_failed_at_not_its_advice():
    """torch.onnx wraps its cause ("Cannot view a tensor …", on T5's program) under three lines of advice; the
    failure gives the cause, the graph node and its aten op."""
    from portability.converters.torch_onnx import _message, _op

    class ConversionError(Exception):
        pass

    e = ConversionError("Failed to decompose the FX graph for ONNX compatibility. \x1b[96mThis is step 2/3\x1b[0m of "
                        "exporting the model to ONNX. Next steps:\n- Create an issue in the PyTorch GitHub repository\n"
                        "<class 'ValueError'>: Cannot view a tensor with shape torch.Size([1, 8, 2, 24]) and strides "
                        "(384, 24, 192, 1) as a tensor with shape (1, 8, 48)!\nWhile executing %view_4 : [num_users=1] = "
                        "call_function[target=torch.ops.aten.view.default](args = (%transpose_3, [1, 8, -1]), kwargs = {})")
    m = _message(e)
    assert m.startswith("ConversionError: Failed to decompose the FX graph for ONNX compatibility: ValueError: Cannot view")
    assert "Next steps" not in m and "%view_4" in m and _op(m) == "view"
