"""``study --zoo transformers``: tiny Hugging Face models built here from their configurations (random weights,
the hub offline), exported to ONNX and to a .pt2, each checked; the table names each failure's route."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli
from portability.study import transformers as tz

pytestmark = pytest.mark.skipif(not tz.status()[0], reason=f"{tz.status()[1]} (portability setup transformers)")


def test_the_transformer_zoo_builds_bert_and_checks_both_of_its_exports(tmp_path):
    out = tmp_path / "study.json"
    p = run_cli("study", "--zoo", "transformers", "--models", "bert", "--targets", "server/ort-cpu,server/ort-q4",
                "--json", str(out), "--markdown", str(tmp_path / "t.md"), "--cache-dir", str(tmp_path / "cache"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["zoo"] == "transformers" and [(r["model"], r["format"]) for r in doc["rows"]] == [("bert", "onnx"), ("bert", "pt2")]
    for r in doc["rows"]:
        t = {t["id"]: t for t in r["report"]["targets"]}
        assert t["server/ort-q4"]["status"] == "pass" and t["server/ort-q4"]["details"]["artifact_meta"]["quantized_ops"]["MatMulNBits"] > 0
    # the ONNX export keeps its dynamic axes, as a published export does; the program is traced at its example
    onnx_in, pt2_in = ({i["name"]: i["shape"] for i in r["report"]["model"]["inputs"]} for r in doc["rows"])
    assert onnx_in == {"input_ids": ["batch", "sequence"], "attention_mask": ["batch", "sequence"]}
    assert list(pt2_in.values()) == [[1, 8], [1, 8]]
    table = (tmp_path / "t.md").read_text()
    assert "| `server/ort-q4` | pass | pass |" in table
    # built once: a second study takes the files from the cache
    p = run_cli("study", "--zoo", "transformers", "--models", "bert", "--targets", "server/ort-cpu",
                "--json", str(out), "--cache-dir", str(tmp_path / "cache"))
    assert p.returncode == 0 and "building bert" not in p.stderr


def test_an_unknown_transformer_or_a_founding_zoo_option_is_a_usage_error(tmp_path):
    p = run_cli("study", "--zoo", "transformers", "--models", "llama", "--json", str(tmp_path / "s.json"))
    assert p.returncode == 2 and "unknown transformer model(s) llama" in p.stderr and "bert" in p.stderr
    p = run_cli("study", "--zoo", "transformers", "--frameworks", "keras", "--json", str(tmp_path / "s.json"))
    assert p.returncode == 2 and "founding zoo" in p.stderr
