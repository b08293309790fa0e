"""``portability localize``: on models built to go wrong at one known node on one target, the node is named,
its inputs are clean, and the reproducer written for it goes wrong by itself on that target — checked here
with a separate ``portability check`` of the reproducer file."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import FIXTURES, by_id, check_json, run_cli


def _save(tmp_path, name: str, nodes, inits, x_shape, y_shape, opset: int) -> str:
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, path)
    return str(path)


def old_softmax(tmp_path) -> str:
    """Conv -> Relu -> Conv -> Softmax(axis=1, opset 11) -> Mul. Before opset 13, Softmax on a 4-D tensor
    normalizes over every axis from 1 on (C*H*W values); onnx2tf's converted graph normalizes over the channels
    only: every TensorFlow target drifts at the Softmax, and nowhere before it."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.5).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((4, 4, 1, 1)) * 0.5).astype(np.float32), "w2")
    k = numpy_helper.from_array(np.array(100.0, np.float32), "k")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Softmax", ["c2"], ["s"], axis=1, name="softmax"),
             helper.make_node("Mul", ["s", "k"], ["y"], name="scale")]
    return _save(tmp_path, "old_softmax", nodes, [w1, w2, k], [1, 3, 8, 8], [1, 4, 8, 8], 11)


def outlier_weights(tmp_path) -> str:
    """fc1 -> Relu -> Concat(a zero feature) -> fc2 -> Relu -> fc3. fc2's weights hold one outlier (8, among
    values of about 0.25) on the row of the zero feature: it adds nothing to the output, but per-tensor int8
    weights get a step of 8/127, so dynamic int8 quantization drifts at fc2 (cosine about 0.99) while fc1 keeps
    its precision (cosine 0.9999)."""
    rng = np.random.default_rng(1)
    w = [(rng.standard_normal(shape) * 0.25).astype(np.float32) for shape in ((16, 16), (17, 16), (16, 16))]
    w[1][16, 5] = 8.0
    inits = [numpy_helper.from_array(a, f"w{i}") for i, a in enumerate(w)] + [numpy_helper.from_array(np.zeros((1, 1), np.float32), "zero")]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h1"], name="fc1"), helper.make_node("Relu", ["h1"], ["a1"], name="act1"),
             helper.make_node("Concat", ["a1", "zero"], ["a1z"], axis=1, name="pad"),
             helper.make_node("MatMul", ["a1z", "w1"], ["h2"], name="fc2"), helper.make_node("Relu", ["h2"], ["a2"], name="act2"),
             helper.make_node("MatMul", ["a2", "w2"], ["y"], name="fc3")]
    return _save(tmp_path, "outlier", nodes, inits, [1, 16], [1, 16], 13)


def unranked_outlier(tmp_path, how: str) -> str:
    """outlier_weights with act1's output reshaped to a rank ONNX's shape inference cannot tell, then back, so
    that from there on no tensor has a known rank, fc2's included. ``padded``: reshaped to its shape padded
    with ones to rank 3 by a computed Pad (as MXNet's exporter writes its swapaxes), then flattened — ONNX
    Runtime's symbolic shape inference tells the ranks; ``squeezed``: a Squeeze of computed axes (Identity of
    a constant) — it cannot either."""
    m = onnx.load(outlier_weights(tmp_path))
    nodes = list(m.graph.node)
    at = [n.name for n in nodes].index("pad")
    nodes[at].input[0] = "a1r"
    i64 = lambda v, n: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    if how == "padded":
        extra = [helper.make_node("Shape", ["a1"], ["s"]), helper.make_node("Shape", ["s"], ["r"]),
                 helper.make_node("Sub", ["three", "r"], ["d"]), helper.make_node("Concat", ["zero1", "d"], ["pads"], axis=0),
                 helper.make_node("Pad", ["s", "pads", "one"], ["sp"]),
                 helper.make_node("Reshape", ["a1", "sp"], ["a3"], name="lift"),
                 helper.make_node("Flatten", ["a3"], ["a1r"], axis=1, name="drop")]
        consts = [i64([3], "three"), i64([0], "zero1"), i64(1, "one")]
    else:
        extra = [helper.make_node("Unsqueeze", ["a1", "ax"], ["u"], name="lift"),
                 helper.make_node("Identity", ["ax"], ["ax2"], name="axes"),
                 helper.make_node("Squeeze", ["u", "ax2"], ["a1r"], name="drop")]
        consts = [i64([0], "ax")]
    nodes[at:at] = extra
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.initializer.extend(consts)
    onnx.checker.check_model(m)
    typed = {v.name: v.type for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    assert not typed["h2"].tensor_type.HasField("shape")  # fc2's output: no rank
    out = tmp_path / f"unranked_{how}.onnx"
    onnx.save(m, out)
    return str(out)


def flat_after_shift(tmp_path) -> str:
    """x * 1e-4 + 5, then back. Full-integer quantization gives the shifted tensor a scale of about 5/255:
    its values (5 to 5.0001) all quantize to the same step, and from there on the int8 model's output no
    longer depends on its input."""
    c = lambda v, n: numpy_helper.from_array(np.array(v, np.float32), n)  # noqa: E731
    nodes = [helper.make_node("Mul", ["x", "tiny"], ["a"], name="squeeze"),
             helper.make_node("Add", ["a", "five"], ["b"], name="shift"),
             helper.make_node("Relu", ["b"], ["r"], name="relu"),
             helper.make_node("Sub", ["r", "five"], ["d"], name="unshift"),
             helper.make_node("Mul", ["d", "big"], ["y"], name="stretch")]
    return _save(tmp_path, "flat", nodes, [c(1e-4, "tiny"), c(5.0, "five"), c(1e4, "big")], [1, 8], [1, 8], 13)


def localize(tmp_path, model: str, target: str, *extra: str, expect_rc: int = 1) -> dict:
    out = tmp_path / "loc"
    p = run_cli("localize", model, "--target", target, "--out", str(out), "--json", str(tmp_path / "loc.json"), *extra)
    assert p.returncode == expect_rc, p.stderr[-3000:] + p.stdout[-2000:]
    doc = json.loads((tmp_path / "loc.json").read_text())
    assert json.loads((out / "localize.json").read_text()) == doc
    return doc


def reproduces_alone(tmp_path, doc: dict, target: str) -> dict:
    """``portability check`` of the reproducer file with its inputs: the target's result there."""
    r = doc["reproducer"]
    (tmp_path / "alone").mkdir(exist_ok=True)
    rep = check_json(tmp_path / "alone", r["model"], "--targets", target, "--inputs", r["inputs"], "--runs", "0",
                     expect_rc=None)
    return by_id(rep)[target]


@pytest.mark.mobile
def test_a_converted_target_is_bisected_to_the_node_that_drifts(tmp_path):
    """The TFLite path: onnx2tf's old-opset Softmax. A bisection over five nodes: a handful of conversions."""
    doc = localize(tmp_path, old_softmax(tmp_path), "mobile/tflite-fp32")
    assert doc["status"] == "drift" and doc["method"].startswith("bisection")
    first = doc["first_divergence"]
    assert (first["node"], first["op_type"]) == ("softmax", "Softmax")
    assert first["op_at_fault"] and first["inputs_max_abs"]["c2"] < 1e-4  # clean inputs: the op is at fault
    assert [c["node"] for c in doc["curve"] if c["diverges"]][0] == "softmax"
    assert all(not c["diverges"] for c in doc["curve"] if c["index"] < first["index"])
    assert doc["conversions"] <= 1 + 3 + 1 + 1  # the whole model, log2(5) cuts, the reproducer (and its inputs)
    rep = doc["reproducer"]
    assert rep["kind"] == "node" and rep["reproduces"]
    alone = onnx.load(rep["model"])
    assert [n.op_type for n in alone.graph.node] == ["Softmax"]  # the node by itself, fed the reference's tensor
    assert reproduces_alone(tmp_path, doc, "mobile/tflite-fp32")["status"] == "drift"
    # the delegate A/B: LiteRT's reference kernels compute the converted Softmax the same way: not XNNPACK's fault
    assert doc["kernels_ab"]["reference_kernels"]["diverges"] and doc["kernels_ab"]["verdict"].startswith("both kernel sets")


@pytest.mark.web
def test_the_browser_path_localizes_webgpu_on_the_fixture_lenet(tmp_path):
    """ONNX Runtime Web on WebGPU (a software adapter here) drifts on LeNet: every node's output comes back
    from the page in one run, the first diverging node has clean inputs, and the node alone, fed the
    reference's values, drifts in the browser too."""
    doc = localize(tmp_path, str(FIXTURES / "lenet.onnx"), "web/ort-webgpu")
    assert doc["method"] == "every node's outputs"
    assert len(doc["curve"]) == doc["nodes"]  # every node has a float output in LeNet
    first = doc["first_divergence"]
    assert first is not None and first["op_at_fault"], doc["curve"]
    assert all(not c["diverges"] for c in doc["curve"] if c["index"] < first["index"])
    assert doc["reproducer"]["reproduces"]
    assert reproduces_alone(tmp_path, doc, "web/ort-webgpu")["status"] == "drift"


def test_the_ort_path_localizes_a_quantized_matmul(tmp_path):
    """server/ort-int8 (ONNX Runtime's dynamic quantization) runs the ONNX graph: every node's output, the
    first diverging one is the MatMul whose weights hold the outlier."""
    model = outlier_weights(tmp_path)
    doc = localize(tmp_path, model, "server/ort-int8")
    assert doc["method"] == "every node's outputs" and doc["conversions"] <= 4
    assert [c["node"] for c in doc["curve"]] == ["fc1", "act1", "pad", "fc2", "act2", "fc3"]
    first = doc["first_divergence"]
    assert first["node"] == "fc2" and first["op_at_fault"]
    assert doc["curve"][0]["cosine"] > 0.999 and not doc["curve"][0]["diverges"]
    assert doc["reproducer"]["reproduces"]
    assert reproduces_alone(tmp_path, doc, "server/ort-int8")["status"] == "drift"


def test_a_tensor_of_unknown_rank_is_a_cut_point_when_its_rank_can_be_told(tmp_path):
    """A graph whose tensors' ranks ONNX's shape inference cannot tell (a cut's output must declare one): the
    ranks come from ONNX Runtime's symbolic shape inference, and fc2 is found as before. Where neither can
    tell, those tensors are no cut points: the first cut after them diverges, and the reproducer is the graph
    cut there."""
    doc = localize(tmp_path, unranked_outlier(tmp_path, "padded"), "server/ort-int8")
    assert [c["node"] for c in doc["curve"]] == ["fc1", "act1", "lift", "drop", "pad", "fc2", "act2", "fc3"]
    assert doc["first_divergence"]["node"] == "fc2" and doc["reproducer"]["reproduces"]
    (tmp_path / "s").mkdir()
    doc = localize(tmp_path / "s", unranked_outlier(tmp_path / "s", "squeezed"), "server/ort-int8")
    assert [c["node"] for c in doc["curve"]] == ["fc1", "act1", "lift", "fc3"]
    assert doc["first_divergence"]["node"] == "fc3" and doc["reproducer"]["kind"] == "subgraph"
    assert doc["reproducer"]["reproduces"]


@pytest.mark.mobile
def test_an_output_that_stops_following_the_input_is_localized_where_it_stops(tmp_path):
    doc = localize(tmp_path, flat_after_shift(tmp_path), "mobile/tflite-int8")
    assert doc["mode"] == "constant"
    first = doc["first_divergence"]
    assert (first["node"], first["op_type"]) == ("shift", "Add") and first.get("constant")
    assert doc["first_constant"]["node"] == "shift"
    assert not any(c.get("constant") for c in doc["curve"] if c["index"] < first["index"])
    assert doc["reproducer"]["reproduces"]


def test_a_target_that_agrees_exits_0_and_names_no_node(tmp_path):
    doc = localize(tmp_path, old_softmax(tmp_path), "server/ort-cpu-noopt", expect_rc=0)
    assert doc["status"] == "pass" and doc["first_divergence"] is None and doc["reproducer"] is None


@pytest.mark.parametrize("args, says", [
    (["--target", "nowhere/x"], "unknown target 'nowhere/x'"),
    (["--target", "server/ort-cpu", "--inputs", "missing.npz"], "missing.npz"),
])
def test_usage_errors_are_one_line(tmp_path, args, says):
    p = run_cli("localize", str(FIXTURES / "lenet.onnx"), *args, "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.mobile
def test_check_localize_puts_the_node_in_every_report(tmp_path):
    """``check --localize DIR``: each drifting target's result in its details, a line in the terminal and
    the Markdown summary, a section with the drift curve in the HTML report."""
    model = old_softmax(tmp_path)
    out = tmp_path / "where"
    p = run_cli("check", model, "--targets", "mobile/tflite-fp32", "--runs", "0", "--localize", str(out), "--json",
                str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md"), "--no-history")
    assert p.returncode == 1, p.stderr[-2000:]
    t = by_id(json.loads((tmp_path / "r.json").read_text()))["mobile/tflite-fp32"]
    loc = t["details"]["localize"]
    assert loc["first_divergence"]["node"] == "softmax" and loc["reproducer"]["reproduces"]
    assert (out / "mobile_tflite-fp32" / "reproducer_node.onnx").is_file()
    assert "mobile/tflite-fp32 localized: first diverging node softmax (Softmax, #3 of 5)" in " ".join(p.stdout.split())
    assert "first diverging node softmax (Softmax" in (tmp_path / "r.md").read_text()
    page = (tmp_path / "r.html").read_text()
    assert "Where it diverges" in page and "<svg" in page.split("Where it diverges")[1]
    nd = json.loads((out / "mobile_tflite-fp32" / "node_data.json").read_text())
    assert nd["results"]["s"]["value"] > 1 > nd["results"]["c2"]["value"]  # Model Explorer: softmax red, conv2 green


def test_ort_web_node_placement_names_the_nodes_of_a_partial_fallback():
    """ONNX Runtime's verbose placement log (session_state.cc), as the page's console gives it: with more
    than one provider, each provider's line is followed by its nodes."""
    from portability.runtimes.ort_web import _placed_nodes, _placement

    log = ["[V:onnxruntime:, session_state.cc:1581 VerifyEachNodeIsAssignedToAnEp] Node placements",
           "[V:onnxruntime:, session_state.cc:1584 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [JsExecutionProvider]. Number of nodes: 2",
           "[V:onnxruntime:, session_state.cc:1586 VerifyEachNodeIsAssignedToAnEp]   Conv (conv1)",
           "[V:onnxruntime:, session_state.cc:1586 VerifyEachNodeIsAssignedToAnEp]   Relu (relu1)",
           "[V:onnxruntime:, session_state.cc:1584 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 1",
           "[V:onnxruntime:, session_state.cc:1586 VerifyEachNodeIsAssignedToAnEp]   Einsum (mix/einsum)"]
    assert _placement(log) == {"JsExecutionProvider": 2, "CPUExecutionProvider": 1}
    assert _placed_nodes(log) == {"JsExecutionProvider": ["conv1", "relu1"], "CPUExecutionProvider": ["mix/einsum"]}


def test_a_pytorch_program_is_localized_on_the_checks_own_onnx_export(tmp_path):
    """A .pt2 on a target whose route passes through ONNX: localized on the ONNX export its check makes (the
    same converter, through the cache), with the reference ONNX Runtime on that export; a target whose route
    avoids ONNX (ExecuTorch) is refused in one line."""
    out = tmp_path / "loc"
    p = run_cli("localize", str(FIXTURES / "torch_cnn.pt2"), "--target", "server/ort-int8", "--cosine", "0.99999999",
                "--out", str(out), "--json", str(tmp_path / "l.json"), "--samples", "2")
    assert p.returncode == 1, p.stderr
    doc = json.loads((tmp_path / "l.json").read_text())
    assert doc["source"]["format"] == "torch" and "OnnxFromTorch" in doc["source"]["localized_on"]
    assert doc["first_divergence"]["op_type"] and doc["reproducer"]["reproduces"] is True
    assert "localized on the check's ONNX export" in p.stdout
    p = run_cli("localize", str(FIXTURES / "torch_cnn.pt2"), "--target", "mobile/executorch-xnnpack", "--out", str(tmp_path / "x"))
    assert p.returncode == 2 and "avoids ONNX" in p.stderr and "Traceback" not in p.stderr
