"""``check --generate``: greedy decoding with the key/value cache on every target, token by token, compared
with the reference's; on a tiny decoder in Optimum's layout built by ``tests/decoders.py``."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import FIXTURES, by_id, check_json, run_cli
from decoders import decoder
from test_web import needs_browser

PROMPT = [3, 14, 15, 9]
ARGS = ("--prompt-ids", ",".join(map(str, PROMPT)), "--shape", "input_ids=1x4", "--shape", "past_key_values.0.key=1x2x6x4")


def greedy_with_onnxruntime(path, prompt: list[int], n: int) -> list[int]:
    """An independent greedy loop: ONNX Runtime, the cache fed back by name, written here from Optimum's layout."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    past = {i.name: np.zeros((1, 2, 0, 4), np.float32) for i in sess.get_inputs() if i.name.startswith("past_key_values")}
    ids, out = list(prompt), []
    for _ in range(n):
        start = len(ids) - (len(prompt) if not out else 1)
        fed = ids[start:]
        res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {
            "input_ids": np.array([fed], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
            "position_ids": np.arange(start, len(ids), dtype=np.int64)[None], **past})))
        tok = int(np.argmax(res["logits"][0, -1]))
        out.append(tok)
        ids.append(tok)
        past = {k: res[k.replace("past_key_values", "present")] for k in past}
    return out


def test_the_references_tokens_are_those_of_an_independent_greedy_loop(tmp_path):
    path = decoder(tmp_path / "decoder_with_past_model.onnx")
    report = check_json(tmp_path, path, "-t", "server/ort-cpu-noopt,server/ort-int8", "--generate", "16", *ARGS)
    got = by_id(report)
    want = greedy_with_onnxruntime(path, PROMPT, 16)
    ref = got["server/ort-cpu"]["metrics"]["generation"]
    assert ref["tokens"] == want and ref["matched"] == 16 and ref["ttft_ms"] > 0 and ref["tokens_per_s"] > 0
    same = got["server/ort-cpu-noopt"]["metrics"]["generation"]
    assert same["tokens"] == want and same["matched"] == 16 and same["first_divergence"] is None
    assert same["teacher_forced"]["max_abs"] <= 1e-4 and same["teacher_forced"]["cosine"] > 0.9999
    assert got["server/ort-cpu-noopt"]["status"] == "pass"
    q = got["server/ort-int8"]["metrics"]["generation"]  # a quantized variant says how far it got
    assert set(q) >= {"tokens", "reference_tokens", "matched", "first_divergence", "margin", "teacher_forced",
                      "ttft_ms", "tokens_per_s"}
    assert q["reference_tokens"] == want and 0 <= q["matched"] <= 16
    assert (q["first_divergence"] is None) == (q["matched"] == 16)


def test_a_divergence_is_named_with_its_step_and_the_references_margin(tmp_path):
    """q4 weights drift enough to change tokens: the first divergent step, the margin there, the tokens."""
    path = decoder(tmp_path / "decoder_with_past_model.onnx")
    report = check_json(tmp_path, path, "-t", "server/ort-q4", "--generate", "16", *ARGS, "--prompt-ids", "7,7,7,7",
                        "--html", str(tmp_path / "r.html"))
    q = by_id(report)["server/ort-q4"]
    g = q["metrics"]["generation"]
    k = g["first_divergence"]
    assert k is not None and g["matched"] == k and g["tokens"][:k] == g["reference_tokens"][:k]
    assert g["tokens"][k] != g["reference_tokens"][k] and g["margin"] > 0
    assert q["status"] == "drift" and any(f"generation diverges at step {k}" in b for b in q["breaches"])
    html = (tmp_path / "r.html").read_text()  # the HTML report's section: its bar and the divergent token marked
    assert "<h2>Generation</h2>" in html and f"{k}/16" in html
    assert f'<b style="color:#c62828">{g["tokens"][k]}</b>' in html


def test_generate_on_a_model_that_is_not_a_decoder_is_a_usage_error():
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--generate", "4")
    assert p.returncode == 2 and "--generate needs a causal language model's decoder" in p.stderr
    assert "Traceback" not in p.stderr


def test_a_prompt_outside_the_vocabulary_is_a_usage_error(tmp_path):
    p = run_cli("check", str(decoder(tmp_path / "d.onnx")), "--generate", "4", "--prompt-ids", "1,500")
    assert p.returncode == 2 and "outside the vocabulary" in p.stderr


@pytest.mark.slow
@needs_browser
def test_every_runtime_with_a_growing_cache_generates_the_same_tokens(tmp_path):
    """ONNX Runtime in the browser (the loop in the page), ORT Mobile's format here and under ARM64 emulation:
    all 16 tokens; a TFLite model converted at fixed shapes cannot grow its cache, and says at which step."""
    from portability.mobile import arm64

    path = decoder(tmp_path / "decoder_with_past_model.onnx")
    targets = ["web/ort-wasm", "mobile/ort-mobile", "mobile/tflite-fp32"] + (["mobile/arm64-ort"] if arm64.status()[0] else [])
    report = check_json(tmp_path, path, "-t", ",".join(targets), "--generate", "16", *ARGS, expect_rc=1)
    got = by_id(report)
    want = greedy_with_onnxruntime(path, PROMPT, 16)
    for t in targets:
        if t == "mobile/tflite-fp32":
            assert got[t]["status"] == "run-error" and "generation step" in got[t]["error"], got[t]
            continue
        g = got[t]["metrics"]["generation"]
        assert got[t]["status"] == "pass" and g["tokens"] == want and g["matched"] == 16, (t, g)
    # the browser's loop ran in its page, the cache in onnxruntime-web's tensors; the others' in their worker
    assert got["web/ort-wasm"]["details"]["generation"]["loop"] == "page"
    assert got["mobile/ort-mobile"]["details"]["generation"]["loop"] == "worker"
    # an emulator's speed is no device's: its generation is compared, not timed
    if "mobile/arm64-ort" in got:
        g = got["mobile/arm64-ort"]["metrics"]["generation"]
        assert g["ttft_ms"] is None and g["tokens_per_s"] is None and g["speed_skipped"] == "emulated", g
    assert got["mobile/ort-mobile"]["metrics"]["generation"]["tokens_per_s"] > 0
