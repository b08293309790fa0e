"""The study's views over its JSON alone: who a failure belongs to, how robustness moved per framework and
platform. Rows here are written the way ``study.rows.summarize_target`` writes them."""
from __future__ import annotations

import pytest

from portability.study import stats, tables


def _row(fw, targets, seed=0, weights="own"):
    return {"framework": fw, "arch": "lenet1", "dataset": "mnist", "seed": seed, "weights": weights,
            "reference": "server/torch", "training": {"status": "ok"}, "baseline": {"accuracy": 0.9}, "targets": targets}


def test_a_convert_error_belongs_to_the_step_that_failed_not_the_last_that_worked():
    t = {"id": "mobile/tflite-int8", "platform": "mobile", "status": "convert-error", "error": "boom", "op": "Erf",
         "chain": ["TorchFromTorch", "OnnxFromTorch"], "steps": ["TorchFromTorch", "OnnxFromTorch", "SavedModelFromOnnx", "TfliteInt8"]}
    study = {"rows": [_row("torch", [t])]}
    v = tables.failures(study)
    assert v.rows == [["SavedModelFromOnnx", "1"]]
    assert any("boom (op Erf)" in n for n in v.notes), v.notes
    # a failure before any conversion (no route recorded): the converter, unnamed
    assert tables._where({**t, "chain": [], "steps": []}) == "converter"


def _rb(flip, fgsm, pgd):
    attacks = {name: [{"epsilon": 0.01, "success_rate_delta": 0.0}, {"epsilon": 0.1, "success_rate_delta": d}]
               for name, d in (("fgsm", fgsm), ("pgd", pgd))}
    return {"available": True, "worst_flip_rate": flip, "adversarial": {"attacks": attacks}}


def test_robustness_moves_per_framework_and_platform_at_the_largest_epsilon():
    ref = {"id": "server/torch", "platform": "server", "status": "pass", "robustness": _rb(None, 0.0, 0.0)}
    rows = [_row("torch", [ref, {"id": "mobile/tflite-int8", "platform": "mobile", "status": "pass", "robustness": _rb(0.05, 0.02, -0.01)},
                           {"id": "mobile/tflite-fp32", "platform": "mobile", "status": "pass", "robustness": _rb(0.0, 0.0, 0.03)},
                           {"id": "web/ort-webgl", "platform": "web", "status": "run-error", "robustness": None}]),
            _row("torch", [ref, {"id": "mobile/tflite-int8", "platform": "mobile", "status": "pass", "robustness": _rb(0.01, 0.04, 0.0)}],
                 weights="torch")]  # a same-weights row: not the framework's own model, left out
    cells = {(c["framework"], c["platform"]): c for c in stats.robustness_moves({"rows": rows})["cells"]}
    assert list(cells) == [("torch", "mobile")]  # the reference and a target without robustness measure nothing
    c = cells[("torch", "mobile")]
    assert c["measured"] == 2 and c["flip_rate"]["max"] == 0.05 and c["flip_rate"]["mean"] == pytest.approx(0.025)
    assert (c["fgsm_success_delta"]["min"], c["fgsm_success_delta"]["max"]) == (0.0, 0.02)
    assert c["pgd_success_delta"]["mean"] == pytest.approx(0.01)
    (v,) = tables.robustness_moves({"rows": rows})
    assert v.rows == [["torch", "mobile", "2", "2.5 (max 5.0)", "+1.0 [+0.0, +2.0]", "+1.0 [-1.0, +3.0]"]]
