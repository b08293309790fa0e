"""``study --zoo generation``: tiny GPT-2, Llama and Qwen2 decoders built from their ``transformers``
configurations (random weights, the hub offline), exported in Optimum's layout with their cache, each checked
with ``--generate``; the table gives tokens matched and tokens/s per target."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli
from portability.study import generation as gz
from portability.study import transformers as tz

needs_transformers = pytest.mark.skipif(not tz.status()[0], reason=f"{tz.status()[1]} (portability setup transformers)")


@pytest.mark.slow
@needs_transformers
def test_the_zoos_llama_is_built_in_optimums_layout_and_generates_16_of_16(tmp_path):
    out, md = tmp_path / "study.json", tmp_path / "t.md"
    p = run_cli("study", "--zoo", "generation", "--quick", "--models", "llama", "--targets", "server/ort-cpu-noopt",
                "--json", str(out), "--markdown", str(md), "--cache-dir", str(tmp_path / "cache"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["zoo"] == "generation" and doc["steps"] == 16 and [r["model"] for r in doc["rows"]] == ["llama"]
    row = doc["rows"][0]
    # Llama's parts, read from the exported graph: rotary positions, RMSNorm, 2 key/value heads for 4 query heads
    arch = row["architecture"]
    assert arch["rope"] and arch["rmsnorm"] and arch["gqa"] and (arch["heads"], arch["kv_heads"]) == (4, 2)
    assert arch["inputs"] == ["input_ids", "attention_mask", "position_ids", "past_key_values.0.key",
                              "past_key_values.0.value", "past_key_values.1.key", "past_key_values.1.value"]
    assert arch["outputs"] == ["logits", "present.0.key", "present.0.value", "present.1.key", "present.1.value"]
    assert arch["past_dims"] == ["batch_size", 2, "past_sequence_length", 12]
    model = {i["name"]: i["shape"] for i in row["report"]["model"]["inputs"]}
    assert model["attention_mask"] == ["batch_size", "total_sequence_length"]
    assert model["input_ids"] == model["position_ids"] == ["batch_size", "sequence_length"]
    t = {t["id"]: t for t in row["report"]["targets"]}
    ref, noopt = (t[k]["metrics"]["generation"] for k in ("server/ort-cpu", "server/ort-cpu-noopt"))
    assert ref["tokens"] == row["torch_tokens"] and len(set(ref["tokens"])) > 4  # PyTorch's own tokens, not one repeated
    assert noopt["matched"] == 16 and noopt["first_divergence"] is None and t["server/ort-cpu-noopt"]["status"] == "pass"
    assert noopt["tokens_per_s"] > 0 and noopt["ttft_ms"] > 0
    table = md.read_text()
    assert "| `server/ort-cpu-noopt` | 16/16 | – |" in table and "rotary positions: yes, RMSNorm: yes, grouped-query attention: yes" in table
    assert "The reference's tokens equal PyTorch's" in table


def test_encoder_decoders_are_named_not_built_and_an_unknown_model_is_a_usage_error(tmp_path):
    class Quiet:
        def stage(self, text):
            pass

    doc = gz.run_zoo(["t5", "whisper"], "server/ort-cpu", None, tmp_path, 0, 4, Quiet())
    assert [r["why"] for r in doc["rows"]] == [gz.NOT_BUILT["t5"], gz.NOT_BUILT["whisper"]]
    assert "--encoder" in gz.NOT_BUILT["t5"] and "not checked: an encoder-decoder" in gz.table(doc)
    p = run_cli("study", "--zoo", "generation", "--models", "bert", "--json", str(tmp_path / "s.json"))
    assert p.returncode == 2 and "unknown generation model(s) bert" in p.stderr and "llama" in p.stderr
    p = run_cli("study", "--zoo", "transformers", "--generate", "8", "--json", str(tmp_path / "s.json"))
    assert p.returncode == 2 and "--generate is the generation zoo's" in p.stderr
