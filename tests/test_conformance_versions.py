"""The conformance corpus at versions the reference runtime reads: cases stamped newer than the installed
ONNX Runtime reads are converted down (or give way to an older case of their op), and load and give the
spec's outputs there; those that cannot be are counted with their reasons."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from portability.audit import conformance, lowering


def _session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _refused(model) -> str | None:
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return None
    except Exception as e:  # noqa: BLE001
        return str(e)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conformance")
    items, _ = conformance.build(folder)
    return folder, items


def test_cases_the_reference_could_not_read_are_converted_down_and_give_the_specs_outputs(corpus):
    folder, items = corpus
    reads = lowering.limits()
    assert reads and reads["reader"] == f"onnxruntime {ort.__version__}"
    originals = {c.name: c for c in conformance.collect()}
    recorded = [i for i in items if i.versions]
    converted = [i for i in recorded if "to" in i.versions]
    refused = {i.name: i.versions["refused"] for i in recorded if "refused" in i.versions}
    assert len(converted) + len(refused) == len(recorded)
    for i in recorded:  # each was stamped newer than the reader reads, and the reader refused it so
        was = originals[i.versions.get("instead_of", i.name)].model
        assert lowering.newer(was, reads), i.name
        why = _refused(was)
        assert why and ("IR version" in why or "opset" in why.lower()), (i.name, why)
    for i in converted:
        to = i.versions["to"]
        assert to["ir_version"] <= reads["ir_version"] and to["opset"] <= reads["opset"], i.name
        model = onnx.load(str(i.path))
        assert lowering.versions(model) == to
        s = _session(i.path)
        with np.load(i.path.parent / "inputs.npz") as z:
            feeds = {k: z[k] for k in z.files}
        with np.load(i.expected) as z:
            expected = {k: z[k] for k in z.files}
        got = dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
        rtol, atol = i.tolerance
        for name, exp in expected.items():
            np.testing.assert_allclose(got[name], exp, rtol=rtol, atol=atol, equal_nan=True, err_msg=i.name)
    for i in recorded:  # kept as they are, with the reason
        if "refused" in i.versions:
            assert i.versions["refused"] and lowering.versions(onnx.load(str(i.path))) == i.versions["from"]
    doc = json.loads((folder / onnx.__version__ / "versions.json").read_text())
    assert doc["reader"] == reads and set(doc["cases"]) == {i.name for i in recorded}
    if (onnx.__version__, ort.__version__) == ("1.23.2", "1.31.1"):  # the installed pair: 21 cases stamped newer
        assert len(converted) == 18 and sorted(i.op for i in recorded if "refused" in i.versions) == [
            "CausalConvWithState", "LinearAttention", "SwiGLU"]
        assert all("No Previous Version" in why for why in refused.values())


def test_a_case_gives_way_to_an_older_case_of_its_op_the_reference_reads(corpus):
    _, items = corpus
    for i in items:
        if i.versions and "instead_of" in i.versions:
            assert i.name != i.versions["instead_of"] and i.versions["why"]
            assert conformance._norm(i.op) in conformance._norm(i.versions["instead_of"])


def _cast_model(to: int, ir: int, opset: int):
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=to)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", to, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def test_the_ir_version_is_lowered_only_where_the_model_needs_nothing_newer():
    reads = lowering.limits()
    newest = onnx.IR_VERSION
    if newest <= reads["ir_version"]:
        pytest.skip("the installed ONNX Runtime reads onnx's newest IR version")
    model, record = lowering.lower(_cast_model(TensorProto.FLOAT16, newest, reads["opset"]), reads)
    assert record == {"from": {"ir_version": newest, "opset": reads["opset"]},
                      "to": {"ir_version": reads["ir_version"], "opset": reads["opset"]}}
    newer_type = getattr(TensorProto, "FLOAT6E2M3", None)
    if newer_type is None or newest < 14:
        return
    with pytest.raises(lowering.Unreadable, match="needs IR version 14"):
        lowering.lower(_cast_model(newer_type, newest, reads["opset"]), reads)
