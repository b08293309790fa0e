"""A causal language model's decoder in Optimum's layout is read by its interface, and the inputs made for it
agree with each other: the mask covers past + sequence, positions count on from the past."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import by_id, check_json
from decoders import TOTAL_DIM, decoder
from portability.core import decoder as dec
from portability.core import inputs as inp
from portability.core.model import load_model
from test_web import needs_browser, needs_tf


def test_a_decoder_with_past_gets_a_mask_over_past_and_sequence_and_positions_after_the_past(tmp_path):
    model = load_model(decoder(tmp_path / "decoder_with_past_model.onnx"))
    lay = dec.layout(model)
    assert lay is not None and lay.mask == "attention_mask" and lay.positions == "position_ids"
    assert lay.past == ("past_key_values.0.key", "past_key_values.0.value", "past_key_values.1.key", "past_key_values.1.value")
    assert dict((i.name, i.shape) for i in model.inputs)["attention_mask"][1] == TOTAL_DIM
    shapes, notes = inp.resolve_shapes(model, inp.parse_shapes(["input_ids=1x5", "past_key_values.0.key=1x2x7x4"], model))
    assert shapes["attention_mask"] == (1, 12) and shapes["past_key_values.1.value"] == (1, 2, 7, 4)
    assert any("causal language model's decoder" in n and "(7 + 5)" in n for n in notes)
    assert not any("'attention_mask' axis 1" in n for n in notes)  # no default length said for the mask
    feeds = inp.synthesize(model, shapes, 3, seed=0)
    assert feeds.arrays["attention_mask"].shape == (3, 1, 12) and (feeds.arrays["attention_mask"] == 1).all()
    assert (feeds.arrays["position_ids"] == np.arange(7, 12)).all()
    # the reference runs on them (before, the mask's default length made ONNX Runtime refuse to broadcast)
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model.path))
    logits = sess.run(["logits"], feeds.batch(0))[0]
    assert logits.shape == (1, 5, 50)


def test_the_defaults_keep_the_mask_consistent_and_a_given_mask_shape_wins(tmp_path):
    model = load_model(decoder(tmp_path / "d.onnx"))
    shapes, _ = inp.resolve_shapes(model, {})
    past, seq = dec.lengths(model, dec.layout(model), shapes)
    assert shapes["attention_mask"][1] == past + seq
    given = inp.parse_shapes(["attention_mask=1x3"], model)
    assert inp.resolve_shapes(model, given)[0]["attention_mask"] == (1, 3)


def test_an_encoder_with_ids_and_mask_is_not_taken_for_a_decoder(tmp_path):
    """BERT's input_ids and attention_mask, with no past and no present: the roles of old (a padded tail)."""
    model = load_model(decoder(tmp_path / "d.onnx"))
    import dataclasses

    bert = dataclasses.replace(model, inputs=tuple(i for i in model.inputs if not i.name.startswith("past")),
                               outputs=tuple(o for o in model.outputs if o.name == "logits"))
    assert dec.layout(bert) is None


@pytest.mark.slow
@needs_browser
@needs_tf
def test_a_decoder_in_optimums_layout_passes_on_the_float_targets(tmp_path):
    path = decoder(tmp_path / "decoder_with_past_model.onnx")
    targets = "server/ort-cpu-noopt,server/tf,web/ort-wasm,web/tfjs-wasm,web/litert-js,mobile/tflite-fp32,mobile/ort-mobile"
    report = check_json(tmp_path, path, "-t", targets, "--shape", "input_ids=1x4", "--shape", "past_key_values.0.key=1x2x6x4")
    got = by_id(report)
    assert {t: got[t]["status"] for t in targets.split(",")} == {t: "pass" for t in targets.split(",")}
    assert report["inputs"]["shapes"]["attention_mask"] == [1, 10]
    assert any("causal language model's decoder" in n for n in report["notes"])


def test_a_decoder_without_past_checks_on_the_server(tmp_path):
    path = decoder(tmp_path / "decoder_model.onnx", with_past=False)
    report = check_json(tmp_path, path, "-t", "server/ort-cpu-noopt")
    assert by_id(report)["server/ort-cpu-noopt"]["status"] == "pass"
