"""The classic tracing fault, caught by ``check --generate`` against the PyTorch source: a decoder that reads its
position offset from the past's length (``past.shape[2]``), exported to ONNX by the TorchScript tracer (``--via
OnnxFromTorchScript``), holds that offset as a constant at the past length it was traced with. On a single pass
at that length it agrees with the program; generating, it parts at the first step whose past differs. The
dynamo exporter keeps the length symbolic and matches every token. A ``.pt2`` built by ``tests/decoders.py``, and
the module itself through the Python API (``dynamic_shapes``: exported with its lengths dynamic)."""
from __future__ import annotations

import pytest

from conftest import by_id, check_json
from decoders import torch_decoder, torch_decoder_module

pytest.importorskip("onnxscript")
pytestmark = pytest.mark.slow  # four checks, about 10 s each

PROMPT = "3,14,15,9"
#: traced at the prefill: the prompt's 4 tokens, no past (step 0 of the generation; step 1 has a past of 4)
PREFILL = ("--shape", "input_ids=1x4", "--shape", "past_key_values_0_key=1x2x0x4",
           "--shape", "past_key_values_0_value=1x2x0x4")
GENERATE = ("--generate", "8", "--prompt-ids", PROMPT)
TRACER = ("--via", "OnnxFromTorchScript")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return torch_decoder(tmp_path_factory.mktemp("pt2") / "decoder.pt2")


def test_a_traced_export_agrees_with_its_program_on_the_single_pass_it_was_traced_at(program, tmp_path):
    report = check_json(tmp_path, program, "-t", "server/ort-cpu", *TRACER, *PREFILL)
    t = by_id(report)["server/ort-cpu"]
    assert t["status"] == "pass" and t["breaches"] == [], t
    assert t["details"]["plan"]["via"] == "OnnxFromTorchScript"
    assert "generation" not in t["metrics"]
    assert any("causal language model's decoder" in n for n in report.get("notes", []) + report.get("warnings", [])), report


def test_generating_names_the_first_step_where_the_frozen_offset_parts(program, tmp_path):
    report = check_json(tmp_path, program, "-t", "server/ort-cpu", *TRACER, *PREFILL, *GENERATE, expect_rc=1)
    got = by_id(report)
    ref = got["server/torch"]["metrics"]["generation"]  # the program itself, decoding with its cache
    t = got["server/ort-cpu"]
    g = t["metrics"]["generation"]
    assert ref["matched"] == 8 and g["reference_tokens"] == ref["tokens"]
    # step 0 (the prefill, past 0) is the pass it was traced at; step 1 (past 4) is the first that differs
    assert g["first_divergence"] == 1 and g["matched"] == 1 and g["tokens"][0] == ref["tokens"][0]
    assert g["tokens"][1] != ref["tokens"][1] and not g["tie"]
    steps = g["teacher_forced"]["max_abs_per_step"]
    assert steps[0] <= 1e-4 and min(steps[1:]) > 1.0, steps  # fed the reference's tokens: every later step off
    assert t["status"] == "drift"
    assert any(b.startswith("generation diverges at step 1:") for b in t["breaches"]), t["breaches"]
    # the single pass itself, at the traced length, is within bounds: every breach is generation's
    assert all(b.startswith("generation") for b in t["breaches"]), t["breaches"]
    assert all(o["cosine"] > 0.99999 for o in t["metrics"]["outputs"].values()), t["metrics"]["outputs"]


def test_the_dynamo_export_keeps_the_offset_and_matches_every_token(program, tmp_path):
    report = check_json(tmp_path, program, "-t", "server/ort-cpu", *PREFILL, *GENERATE)
    got = by_id(report)
    t = got["server/ort-cpu"]
    g = t["metrics"]["generation"]
    assert t["status"] == "pass" and g["matched"] == 8 and g["first_divergence"] is None, t
    assert g["tokens"] == got["server/torch"]["metrics"]["generation"]["tokens"]
    assert g["teacher_forced"]["max_abs"] <= 1e-4
    assert "OnnxFromTorch" in str(t["details"]["conversions"]) and "OnnxFromTorchScript" not in str(t["details"]["conversions"])


def test_the_module_through_the_python_api_is_caught_at_the_same_step():
    import portability

    module, example, dims = torch_decoder_module()
    shapes = [PREFILL[i + 1] for i in range(0, len(PREFILL), 2)]
    report = portability.check(module, "server/ort-cpu", example_inputs=example, dynamic_shapes=dims,
                               via="OnnxFromTorchScript", shapes=shapes, generate=8, prompt_ids=PROMPT)
    got = {t.id: t for t in report.targets}
    t = got["server/ort-cpu"]
    assert got["server/torch"].status == "pass" and (got["server/torch"].metrics or {})["generation"]["matched"] == 8
    assert t.status == "drift" and t.metrics["generation"]["first_divergence"] == 1, (t.status, t.breaches)
    assert t.breaches[0].startswith("generation diverges at step 1:")
