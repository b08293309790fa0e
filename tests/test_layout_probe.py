"""The layout probe on square images, where shapes cannot tell NHWC from its height/width swap: a file that
reproduces ONNX Runtime settles the layout; a wrong file settles nothing (the documented NCHW -> NHWC stays,
with a note); and onnx2tf's SavedModel, its float ``.tflite`` files and TF.js each get the layout resolved on
their own file, never a wrong ``.tflite``'s guess."""
from __future__ import annotations

import numpy as np
import pytest

from portability.converters.tflite_layout import PROBE_RTOL, layout_notes, settle

NHWC, SWAP = [0, 2, 3, 1], [0, 3, 2, 1]


def _case():
    """ONNX Runtime's side of a position-dependent model on a square image: y = x * W (NCHW)."""
    rng = np.random.default_rng(0)
    x = rng.random((1, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    io = {"inputs": [{"onnx": "x", "shape": [1, 6, 6, 3], "dtype": "float32", "to_tflite": NHWC}],
          "outputs": [{"onnx": "y", "shape": [1, 6, 6, 3], "to_onnx": [0, 3, 1, 2]}], "resolved_by": "shapes"}
    cands = [[tuple(NHWC), tuple(SWAP)]]
    return x, w, io, cands


def _settle(file_w, bias: float = 0.0):
    """Settle the layout of a "file" that computes y = x * file_w + bias in its own (NHWC) layout."""
    x, w, io, cands = _case()
    settle(lambda xs: [xs[0] * file_w + bias], io, cands, [list(cands[0])], {"x": x}, [x * w])
    return io, w


def test_a_file_that_reproduces_onnx_runtime_settles_its_layout():
    _, w, _, _ = _case()
    io, _ = _settle(w.transpose(0, 2, 3, 1))  # the right NHWC file
    assert io["resolved_by"] == "probe" and io["inputs"][0]["to_tflite"] == NHWC and io["probe"]["conclusive"]
    assert io["probe"]["error"] < 1e-6 < io["probe"]["next_error"] and not layout_notes(io, "the file")
    io, _ = _settle(w.transpose(0, 3, 2, 1))  # a file that really swapped height and width
    assert io["resolved_by"] == "probe" and io["inputs"][0]["to_tflite"] == SWAP


def test_a_wrong_file_settles_nothing_and_says_so():
    """Every candidate is off by about 600; the swap by a little less (as on a broken file in the wild): the
    documented layout stays."""
    _, w, _, _ = _case()
    io, _ = _settle(w.transpose(0, 3, 2, 1) * 1.01, bias=600.0)
    assert io["probe"]["next_error"] > io["probe"]["error"] > 600  # the swap is "best", by a hair
    assert io["inputs"][0]["to_tflite"] == NHWC and io["outputs"][0]["to_onnx"] == [0, 3, 1, 2]
    assert io["resolved_by"] == "documented (probe inconclusive)" and not io["probe"]["conclusive"]
    assert io["probe"]["tolerance"] < 600 * PROBE_RTOL
    (note,) = layout_notes(io, "the .tflite file")
    assert "documented layout" in note


def test_an_output_reading_of_another_shape_is_no_candidate():
    """A square feature map with another channel count ([1, 40, 40, 32] in the file, [1, 32, 40, 40] in ONNX):
    reading it back unpermuted gives another shape, which is no candidate, never an error of the probe."""
    _, w, io, cands = _case()
    x = np.random.default_rng(1).random((1, 3, 6, 6)).astype(np.float32)
    settle(lambda xs: [xs[0] * w.transpose(0, 2, 3, 1)], io, cands, [[(0, 1, 2, 3), tuple(NHWC)]], {"x": x}, [x * w])
    assert io["resolved_by"] == "probe" and io["outputs"][0]["to_onnx"] == [0, 3, 1, 2]


def _corrupt_weights(tflite, w: np.ndarray) -> None:
    """Overwrite the Conv's weight buffer in a .tflite file (found by its bytes, in the layouts TFLite uses)."""
    data = bytearray(tflite.read_bytes())
    for perm in ((0, 2, 3, 1), (0, 1, 2, 3), (2, 3, 1, 0), (1, 2, 3, 0)):
        raw = np.ascontiguousarray(w.transpose(perm)).tobytes()
        at = data.find(raw)
        if at >= 0:
            data[at:at + len(raw)] = np.random.default_rng(9).standard_normal(w.size).astype(np.float32).tobytes()
            tflite.write_bytes(bytes(data))
            return
    raise AssertionError("the Conv's weights are not in the .tflite file")


@pytest.mark.mobile
def test_a_wrong_tflite_lends_no_layout_to_the_savedmodel_or_tfjs(tmp_path, monkeypatch):
    """onnx2tf on a square-image Conv, its fp32 .tflite then broken (its Conv weights overwritten): that file's
    layout is the documented one, with a note; the SavedModel's and the fp16 file's are probed on themselves,
    and TF.js takes the SavedModel's."""
    import onnx
    from onnx import numpy_helper

    import portability.converters.onnx2tf as o2t
    from mobile_models import conv_model
    from portability.converters.base import ConvertContext
    from portability.converters.tfjs import tfjs_io
    from portability.core.model import load_model

    model = conv_model(tmp_path / "square.onnx", shape=(1, 3, 8, 8))
    w = numpy_helper.to_array(next(t for t in onnx.load(str(model)).graph.initializer if t.name == "W"))
    real = o2t.run_onnx2tf

    def broken(onnx_path, out, *a, **kw):
        log, _ = real(onnx_path, out, *a, **kw)
        _corrupt_weights(out / "model_float32.tflite", w)
        return log, None  # what onnx2tf's process described is of the good file: the converter describes the broken one
    monkeypatch.setattr(o2t, "run_onnx2tf", broken)
    info = load_model(model)
    (tmp_path / "sm").mkdir()
    sm = o2t.SavedModelFromOnnx().convert(info.artifact(), tmp_path / "sm", {}, ConvertContext(signature=info.signature()))
    fp32, fp16, own = sm.meta["float_tflite_io"]["fp32"], sm.meta["float_tflite_io"]["fp16"], sm.meta["tflite_io"]
    assert fp32["resolved_by"] == "documented (probe inconclusive)" and fp32["inputs"][0]["to_tflite"] == NHWC
    for io in (own, fp16):  # correct files: the probe finds the real layout on each
        assert io["resolved_by"] == "probe" and io["probe"]["conclusive"] and io["inputs"][0]["to_tflite"] == NHWC
        assert io["outputs"][0]["to_onnx"] == [0, 3, 1, 2]
    assert not sm.meta["notes"]
    (tmp_path / "tfl").mkdir()
    tfl = o2t.TfliteFromSavedModel().convert(sm, tmp_path / "tfl", {"quant": "fp32"}, ConvertContext())
    assert tfl.meta["tflite_io"] == fp32 and "documented layout" in tfl.meta["notes"][0]
    key = own["inputs"][0]["key"]  # TF.js: the SavedModel's signature, the SavedModel's layouts
    doc = {"signature": {"inputs": {key: {"name": f"{key}:0", "dtype": "DT_FLOAT", "tensorShape": {"dim": []}}},
                         "outputs": {own["outputs"][0]["key"]: {}}}}
    assert tfjs_io(doc, sm.meta)["inputs"][0]["to_tfjs"] == NHWC


def test_outputs_named_with_a_leading_slash_pair_by_onnx2tf_spelling_not_position():
    """onnx2tf spells a name that starts with '/' (torch.onnx's) as 'wa/...' in the signature: two outputs of
    one shape paired by position came out swapped (a SiLU's Conv and Sigmoid outputs, on a YOLOv8 cut)."""
    from portability.converters.tflite_layout import _match

    onnx = [{"name": "/model.3/conv/Conv_output_0"}, {"name": "/model.3/act/Sigmoid_output_0"}]
    details = [{"index": 53, "name": "PartitionedCall:0"}, {"index": 52, "name": "PartitionedCall:1"}]  # as LiteRT lists them
    sig = {"wa/model.3/act/Sigmoid_output_0": 53, "wa/model.3/conv/Conv_output_0": 52}
    pairs = _match(onnx, details, sig, "outputs")
    assert [d["index"] for d in pairs] == [52, 53]


def test_tfjs_inputs_are_matched_by_name_whatever_order_and_suffix_the_converter_writes():
    """The tensorflowjs converter may key a SavedModel's ``input_ids`` as ``input_ids:0`` and order keys its
    own way; matching by position then fed the attention mask as the token ids (a BERT drifting at
    cosine 0.61 on every TF.js backend)."""
    from portability.converters.tfjs import tfjs_io

    spec = lambda n: {"name": f"{n}:0", "dtype": "DT_INT32", "tensorShape": {"dim": [{"size": "1"}, {"size": "8"}]}}  # noqa: E731
    doc = {"signature": {"inputs": {"attention_mask:0": spec("attention_mask"), "input_ids:0": spec("input_ids")},
                         "outputs": {"output_0": {"name": "Identity:0"}}}}
    meta = {"onnx_signature": {"inputs": [{"name": "input_ids"}, {"name": "attention_mask"}], "outputs": [{"name": "y"}]},
            "tflite_io": {"inputs": [{"onnx": "input_ids", "key": "input_ids"}, {"onnx": "attention_mask", "key": "attention_mask"}],
                          "outputs": [{"onnx": "y", "key": "output_0"}]}}
    io = tfjs_io(doc, meta)
    assert [(e["onnx"], e["key"]) for e in io["inputs"]] == [("input_ids", "input_ids:0"), ("attention_mask", "attention_mask:0")]


def test_litert_js_outputs_are_matched_by_their_signature_keys_before_their_order():
    """LiteRT.js names a signature's outputs by their keys, in its own order; the file's tensors are called
    StatefulPartitionedCall:N. Matched by position, GPT-2's logits were read from a cache tensor ("axes don't
    match array"); by key, each output is its own."""
    import numpy as np

    from portability.core.protocol import IoMap, TensorLink
    from portability.runtimes.litert_js import LiteRtJs

    rt = LiteRtJs({})
    rt._io = IoMap(inputs=(), outputs=(
        TensorLink("logits", 7, "StatefulPartitionedCall:0", (1, 3), "float32", (0, 1), None, "logits"),
        TensorLink("present", 9, "StatefulPartitionedCall:1", (1, 4, 2), "float32", (0, 2, 1), None, "present")))
    rt._onnx_dtypes = {}
    page = {"present": np.arange(8, dtype=np.float32).reshape(1, 4, 2), "logits": np.ones((1, 3), np.float32)}
    out = rt.from_page(page)
    assert out["logits"].shape == (1, 3) and out["present"].shape == (1, 2, 4)
    assert np.array_equal(out["present"], page["present"].transpose(0, 2, 1))
