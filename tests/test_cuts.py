"""Graph cuts of old models: before IR 4 every initializer must also be a graph input, and a cut that lists
only the model's inputs would be an invalid model. Each cut and each single-node reproducer of an IR-3 model
passes ONNX's checker and computes, in ONNX Runtime, what the full model computes at that node."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from portability.explain.cuts import Graph


def ir3_model(tmp_path, outlier: bool = False):
    """Conv -> Relu -> Conv -> Add(skip) -> Relu -> Conv, opset 9, IR 3, every weight also a graph input (as
    the old model zoo's files are). With ``outlier``, conv2's weights hold one large value on a channel that
    reads zeros: per-tensor int8 weights lose the others' precision there."""
    rng = np.random.default_rng(3)
    w = {"w1": rng.standard_normal((4, 3, 3, 3)), "b1": rng.standard_normal(4), "w2": rng.standard_normal((4, 4, 1, 1)),
         "w3": rng.standard_normal((2, 4, 1, 1))}
    w = {k: (v * 0.5).astype(np.float32) for k, v in w.items()}
    if outlier:
        w["w2"][0, 3, 0, 0] = 40.0
        w["b1"][3] = -100.0  # relu1's channel 3 stays zero: the outlier adds nothing to the output
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["s"], name="skip"),
             helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="conv3")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    ins += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in inits]
    g = helper.make_graph(nodes, "old", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)], ir_version=3)
    onnx.checker.check_model(m, full_check=True)
    path = tmp_path / "old.onnx"
    onnx.save(m, str(path))
    return path


def _intermediates(path, names, x):
    """The full model's values of ``names`` (made graph outputs of a copy)."""
    m = onnx.load(str(path))
    m.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, {"x": x})))


def test_cuts_of_an_ir3_model_are_valid_and_compute_what_the_model_does(tmp_path):
    path = ir3_model(tmp_path)
    g = Graph(path)
    assert g.inputs == ["x"]
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    full = _intermediates(path, ["c1", "r1", "c2", "s", "r2"], x)
    for i in g.cut_points():
        outs = g.floats(i)
        cut = onnx.load(str(g.cut(outs, tmp_path / f"cut{i}" / "model.onnx")))
        onnx.checker.check_model(cut, full_check=True)
        assert cut.ir_version >= 4 and [v.name for v in cut.graph.input] == ["x"]
        s = ort.InferenceSession(cut.SerializeToString(), providers=["CPUExecutionProvider"])
        assert [i_.name for i_ in s.get_inputs()] == ["x"]  # the weights are constants, not inputs to feed
        for name, got in zip(outs, s.run(outs, {"x": x})):
            np.testing.assert_allclose(got, full[name], rtol=1e-6, atol=1e-6)
    # the node alone (the reproducer): fed the reference's values of its computed inputs
    rep, feeds = g.node_alone(3, {"c2": full["c2"], "r1": full["r1"]}, tmp_path / "alone.onnx")
    alone = onnx.load(str(rep))
    onnx.checker.check_model(alone, full_check=True)
    got = ort.InferenceSession(alone.SerializeToString(), providers=["CPUExecutionProvider"]).run(["s"], feeds)[0]
    np.testing.assert_allclose(got, full["s"], rtol=1e-6, atol=1e-6)


def test_an_ir3_model_is_localized_on_a_server_target(tmp_path):
    """``localize`` on the IR-3 model: its cuts run, and conv2 (the outlier's int8 weights) is named."""
    from conftest import run_cli

    model = ir3_model(tmp_path, outlier=True)
    p = run_cli("localize", str(model), "--target", "server/ort-int8", "--out", str(tmp_path / "loc"),
                "--json", str(tmp_path / "loc.json"))
    assert p.returncode == 1 and "invalid ONNX model" not in p.stderr, p.stderr[-2000:]
    doc = json.loads((tmp_path / "loc.json").read_text())
    assert doc["first_divergence"]["node"] == "conv2" and doc["first_divergence"]["op_at_fault"]
    assert not doc["curve"][0]["diverges"] and doc["reproducer"]["reproduces"]


def test_weights_made_by_constant_nodes_are_no_cut_points(tmp_path):
    """The old zoo's light models make their weights with ``ConstantOfShape`` from shape initializers: a cut
    there has nothing to feed and nothing a runtime could get wrong, so bisection cuts only where the input
    reaches."""
    shape = numpy_helper.from_array(np.array([4, 3, 3, 3], np.int64), "w_shape")
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=numpy_helper.from_array(np.array([0.1], np.float32))),
             helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
           helper.make_tensor_value_info("w_shape", TensorProto.INT64, [4])]
    g = helper.make_graph(nodes, "light", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)], ir_version=3)
    onnx.save(m, str(tmp_path / "light.onnx"))
    graph = Graph(tmp_path / "light.onnx")
    assert graph.floats(0) == ["w"]  # a float tensor of known rank: it was a cut point before
    assert graph.cut_points() == [1, 2]
    # nor a cut's output: a converter folds the constant away, and the cut would lose that output
    assert graph.frontier(1) == ["c"]


def test_tensors_made_from_the_input_shape_alone_are_no_cut_points(tmp_path):
    """A detector's anchor grid (``Shape`` → ``Gather`` → ``Range`` → ``Cast``) is a constant once the check fixes
    the shapes: converters fold it, and a cut that names it as an output loses it (a YOLOv8 head's cuts failed
    with "the TFLite model has fewer outputs than the ONNX model")."""
    idx = numpy_helper.from_array(np.array(3, np.int64), "i3")
    zero, one = numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "i3"], ["w"], axis=0, name="width"),
             helper.make_node("Range", ["zero", "w", "one"], ["grid_i"], name="range"),
             helper.make_node("Cast", ["grid_i"], ["grid"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Add", ["r", "grid"], ["y"], name="add")]
    g = helper.make_graph(nodes, "anchors", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 6])], [idx, zero, one])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "anchors.onnx"))
    graph = Graph(tmp_path / "anchors.onnx")
    names = [n.name for n in graph.nodes]
    assert [names[i] for i in graph.cut_points()] == ["relu", "add"]  # not the float grid of the Cast
    assert graph.frontier(names.index("cast")) == ["r"]


def _bisect_with(fails: set[int], first_bad: int, n: int = 10):
    """The bisection over ``n`` cut points of a stand-in graph whose outputs diverge from ``first_bad`` on and
    whose cuts in ``fails`` fail to convert."""
    from types import SimpleNamespace

    from portability.core.status import Status
    from portability.explain.localize import Localizer
    from portability.explain.probe import Probe

    class Stub(Localizer):
        def probe(self, index, tensors, name, runtime=None):
            self.conversions += 1
            if index in fails:
                return Probe(index, Status.CONVERT_ERROR, "the TFLite model has fewer outputs than the ONNX model")
            return Probe(index, Status.DRIFT if index >= first_bad else Status.PASS, None,
                         {"t": {"diverges": index >= first_bad}})

    g = SimpleNamespace(nodes=[SimpleNamespace(op_type="Relu", name=f"n{i}") for i in range(n)], frontier=lambda k: ["t"])
    loc = Stub(g, "mobile/tflite-fp32", None, Path("."), lambda s: None)
    return loc.bisect(list(range(n)), Status.DRIFT.value)


def test_a_cut_that_fails_is_stepped_around_not_taken_for_a_divergence():
    before, first, _ = _bisect_with({4}, first_bad=6)
    assert (before.index, first.index) == (5, 6)


def test_the_bisection_gives_up_where_every_cut_between_clean_and_bad_fails():
    before, first, _ = _bisect_with({4, 5}, first_bad=6)
    assert before is None and first.index in (4, 5) and first.status == "convert-error"
