"""``check --generate`` on an encoder-decoder: a tiny T5 in Hugging Face Optimum's layout
(``study/encoder_decoder.py``: ``encoder_model.onnx`` + ``decoder_model.onnx``), its encoder run once per prompt
on every target and its outputs fed to each decoder step there."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import by_id, check_json, run_cli
from portability.study import transformers as tz
from test_web import needs_browser

pytestmark = pytest.mark.skipif(not tz.status()[0], reason=f"{tz.status()[1]} (portability setup transformers)")

STEPS = 16  # T5's random weights repeat a token for 10 steps, then change: 16 reach two changes


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    from portability.study.encoder_decoder import build

    return build(tmp_path_factory.mktemp("t5"))


def greedy_with_onnxruntime(folder, prompt: list[int], n: int, start: int = 0) -> list[int]:
    """An independent loop: ONNX Runtime, the encoder once, then the decoder one token a step from the start
    token, its presents fed back as the next step's past by name (the cross-attention past starts empty)."""
    import onnxruntime as ort

    enc = ort.InferenceSession(str(folder / "encoder_model.onnx"), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(folder / "decoder_model.onnx"), providers=["CPUExecutionProvider"])
    src = np.array([prompt], np.int64)
    mask = np.ones_like(src)
    states = enc.run(["last_hidden_state"], {"input_ids": src, "attention_mask": mask})[0]
    past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in dec.get_inputs() if i.name.startswith("past_")}
    fed, out = start, []
    for _ in range(n):
        res = dict(zip([o.name for o in dec.get_outputs()], dec.run(None, {
            "input_ids": np.array([[fed]], np.int64), "encoder_attention_mask": mask, "encoder_hidden_states": states, **past})))
        fed = int(np.argmax(res["logits"][0, -1]))
        out.append(fed)
        past = {k: res[k.replace("past_key_values", "present")] for k in past}
    return out


@needs_browser
def test_an_encoder_decoder_generates_on_the_server_and_in_the_browser(t5, tmp_path):
    meta = json.loads((t5 / "decoder_model.json").read_text())
    prompt = meta["prompt"]
    report = check_json(tmp_path, t5 / "decoder_model.onnx", "--encoder", str(t5 / "encoder_model.onnx"),
                        "-t", "server/ort-cpu-noopt,web/ort-wasm", "--generate", str(STEPS),
                        "--prompt-ids", ",".join(map(str, prompt)))
    want = greedy_with_onnxruntime(t5, prompt, STEPS)
    assert want == meta["torch_tokens"][:STEPS]  # the export generates what transformers' own generate does
    assert len(set(want)) > 1
    got = by_id(report)
    for tid in ("server/ort-cpu", "server/ort-cpu-noopt", "web/ort-wasm"):
        t = got[tid]
        assert t["status"] == "pass", (tid, t.get("error"))
        gen = t["metrics"]["generation"]
        assert gen["tokens"] == want and gen["reference_tokens"] == want and gen["matched"] == STEPS, tid
        assert gen["first_divergence"] is None and gen["ttft_ms"] is not None
        if tid != "server/ort-cpu":
            assert gen["teacher_forced"]["max_abs"] < 1e-3, tid
        enc = t["details"]["generation"]["encoder"]  # the encoder converted for this target and run there
        assert enc["conversions"] and enc["ms"] > 0
    assert got["web/ort-wasm"]["details"]["generation"]["loop"] == "worker"


def test_the_single_pass_synthesizes_the_encoder_side_consistently_and_generate_asks_for_the_encoder(t5, tmp_path):
    report = check_json(tmp_path, t5 / "decoder_model.onnx", "-t", "server/ort-cpu", "--shape", "encoder_hidden_states=1x7x48")
    shapes = report["inputs"]["shapes"]
    assert shapes["encoder_attention_mask"] == [1, 7] and shapes["past_key_values.1.encoder.value"] == [1, 2, 7, 24]
    assert any("an encoder-decoder's decoder" in n for n in report["notes"])
    assert by_id(report)["server/ort-cpu"]["status"] == "pass"
    p = run_cli("check", str(t5 / "decoder_model.onnx"), "-t", "server/ort-cpu", "--generate", "4")
    assert p.returncode != 0 and "--encoder encoder_model.onnx" in p.stdout + p.stderr
