"""The study's views over its JSON alone: who a failure belongs to, how robustness moved per framework and
platform. Rows here are written the way ``study.rows.summarize_target`` writes them."""
from __future__ import annotations

import pytest

from portability.study import render, seed_tables, stats, tables


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


def test_a_drift_says_what_moved_and_where_localize_found_it_or_why_not():
    base = {"platform": "web", "status": "drift", "error": None, "chain": ["OnnxFromOnnx"], "steps": ["OnnxFromOnnx"],
            "max_abs": 24.0, "top1_agreement": 0.806, "accuracy_vs_framework": -0.183}
    found = {**base, "id": "web/ort-webgpu", "localized": {"node": None, "op_type": "Conv", "op_at_fault": True}}
    spread = {**base, "id": "server/ort-fp16", "platform": "server", "max_abs": 0.03, "top1_agreement": 1.0,
              "accuracy_vs_framework": 0.0, "localized": {"why": "no node's output diverges by itself"}}
    notes = tables.failures({"rows": [_row("mxnet", [found, spread])]}).notes
    assert notes == [
        "server/ort-fp16 (mxnet) — lenet1/mnist: drift: max |Δ| 3.0e-02, top-1 agreement 100.0 %, accuracy +0.0 points; "
        "localize: no node's output diverges by itself",
        "web/ort-webgpu (mxnet) — lenet1/mnist: drift: max |Δ| 2.4e+01, top-1 agreement 80.6 %, accuracy -18.3 points; "
        "first diverging op Conv (an unnamed node, its inputs clean)"], notes


def _rb(flip, fgsm, pgd):
    attacks = {name: [{"epsilon": 0.01, "success_rate": 0.1, "success_rate_delta": 0.0},
                     {"epsilon": 0.1, "success_rate": 0.5 + d, "success_rate_delta": d}]
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
    # it is over every seed: with several, it is not marked as showing the first seed's
    views = {v.title: v for v in render.views({"options": {"seeds": 2}, "rows": rows})}
    assert not any("first seed" in n for n in views[v.title].notes)
    assert any("first seed" in n for n in views["Accuracy in its own framework, % (eval samples; whole test split in parentheses)"].notes)


def _own(fw, arch, seed, acc, pgd=None, targets=()):
    ref = {"id": "server/ref", "platform": "server", "status": "pass",
           "robustness": {"available": True, "adversarial": {"attacks": {"pgd": [{"epsilon": 0.1, "success_rate": pgd}]}}}
           if pgd is not None else None}
    return {"framework": fw, "arch": arch, "dataset": "mnist", "seed": seed, "weights": "own", "reference": "server/ref",
            "training": {"status": "ok"}, "baseline": {"accuracy": acc}, "targets": [ref, *targets]}


def test_the_seed_papers_findings_get_verdicts_by_their_stated_rules():
    from portability.study.findings import findings

    # two seeds a side: LeNet-1 differs far beyond its spread between the frameworks, and so does PGD's success
    rows = [_own("torch", "lenet1", 0, 0.98, 0.40), _own("torch", "lenet1", 1, 0.981, 0.41),
            _own("keras", "lenet1", 0, 0.90, 0.60), _own("keras", "lenet1", 1, 0.901, 0.61),
            _own("mxnet", "lenet1", 0, 0.95)]
    rows[0]["targets"] += [{"id": "mobile/tflite-int8", "platform": "mobile", "status": "drift", "accuracy_vs_framework": -0.03},
                           {"id": "web/tfjs-webgl", "platform": "web", "status": "run-error"}]
    study = {"rows": rows, "same_weights": {"cells": [
        {"arch": "lenet1", "framework": "keras", "difference": {"n": 2, "mean": 0.0, "values": [0.0, 0.0]},
         "max_abs_vs_torch": 2e-6, "top1_agreement_vs_torch": {"values": [1.0, 1.0]}}]}}
    study["across_seeds"] = stats.across_seeds(study)
    got = {f["finding"].split(" ")[1] + " " + f["finding"].split(" ")[2]: f for f in findings(study)}
    assert got["same training"]["verdict"] == "confirmed"  # torch − keras: 8 points, spread 0.07
    assert got["same training"]["numbers"][0].startswith("lenet1: torch − keras +8.0 points (p 0.")
    assert "95 % CI [+7." in got["same training"]["numbers"][0]
    assert got["same weights"]["verdict"] == "refuted" and "2.0e-06" in got["same weights"]["numbers"][0]
    rob = next(f for f in findings(study) if f["finding"].startswith("adversarial"))
    assert rob["verdict"] == "confirmed" and any("mxnet: not attacked" in n for n in rob["numbers"])
    dep = next(f for f in findings(study) if f["finding"].startswith("migrating"))
    assert dep["verdict"] == "confirmed" and any(n.startswith("web: 1 of 1 target runs failed") for n in dep["numbers"])
    q = next(f for f in findings(study) if f["finding"].startswith("quantizing"))
    assert q["verdict"] == "confirmed" and "-3.0 worst" in q["numbers"][0]  # a drifting int8 target still counts
    web = next(f for f in findings(study) if f["finding"].startswith("a model in the browser"))
    assert web["verdict"] == "cannot decide"  # nothing timed
    # one seed a side decides nothing about the frameworks
    one = {"rows": [rows[0], rows[2]]}
    one["across_seeds"] = stats.across_seeds(one)
    assert next(f for f in findings(one) if f["finding"].startswith("the same training"))["verdict"] == "cannot decide"


def test_a_target_compared_on_fewer_samples_is_measured_against_the_framework_on_those_samples():
    """A slow target (a software GPU) compared on the first batches its budget allowed: its accuracy change is
    against the framework's own accuracy on those samples, not on all of them; the table says n=."""
    from portability.study import rows

    def target(tid, acc, cut=None):
        return {"id": tid, "platform": tid.split("/")[0], "status": "pass", "metrics": {"accuracy": acc},
                "details": {"samples": {"batches": cut, "of": 250, "budget_s": 20.0, "first_ms": 900.0}} if cut else {}}
    report = {"inputs": {"samples": 500, "batches": 250},  # batches of two samples
              "targets": [target("server/torch", 0.9), target("web/ort-webgpu", 1.0, cut=6)]}
    asked = []

    def on_first(n):
        asked.append(n)
        return 0.9 if n == 500 else 1.0  # the first 12 samples are all right in the framework too
    ref, gpu = rows.summarize_check(report, on_first)
    assert (ref["samples"], gpu["samples"]) == (500, 12) and asked == [500, 12]
    assert gpu["accuracy_vs_framework"] == 0.0 and ref["accuracy_vs_framework"] == 0.0
    row = dict(_row("torch", [ref, gpu]), baseline={"accuracy": 0.9, "eval_samples": 500})
    (v,) = tables.deployed_accuracy({"rows": [row]})
    assert ["web/ort-webgpu", "100.0 (+0.0) n=12"] in v.rows and any(n.startswith("n=: ") for n in v.notes)


def test_across_seeds_lists_the_deployments_that_moved_accuracy_with_their_spread():
    """A target that lost accuracy in one seed and much more in another is listed with the change's mean ±
    std and its worst; targets that never moved by half a point are not listed."""
    def t(tid, change):
        return {"id": tid, "platform": "web", "status": "drift" if change else "pass", "accuracy_vs_framework": change}
    rows = [_own("torch", "lenet5", 0, 0.99, targets=[t("web/ort-wasm", 0.0)]),
            _own("keras", "lenet5", 0, 0.99, targets=[t("web/ort-webgpu", -0.078), t("web/ort-wasm", 0.0)]),
            _own("keras", "lenet5", 1, 0.99, targets=[t("web/ort-webgpu", -0.637), t("web/ort-wasm", 0.004)])]
    study = {"rows": rows}
    moved = next(v for v in seed_tables.seeds(study) if v.title.startswith("Across seeds: deployments"))
    assert moved.header == ["model", "dataset", "target", "torch", "keras"]
    assert moved.rows == [["lenet5", "mnist", "web/ort-webgpu", "–", "-35.8 ± 39.5 (worst -63.7, n=2)"]]


def test_a_framework_difference_carries_its_confidence_interval_as_scipy_computes_it():
    """Welch's test here agrees with SciPy's own (p and the 95 % interval of the difference); the interval
    says what the seeds rule out, also when neither side spreads; one seed a side gives none."""
    from scipy.stats import ttest_ind

    a, b = [0.98, 0.981, 0.975], [0.90, 0.901, 0.93]
    w, ref = stats.welch(a, b), ttest_ind(a, b, equal_var=False)
    assert w["p"] == pytest.approx(ref.pvalue) and w["ci95"] == pytest.approx(list(ref.confidence_interval(0.95)))
    assert stats.welch([0.9, 0.9], [0.8, 0.8])["ci95"] == pytest.approx([0.1, 0.1])
    assert stats.welch([0.9], [0.8, 0.8])["ci95"] is None
    study = {"rows": [_own("torch", "lenet1", s, x) for s, x in enumerate(a)] + [_own("keras", "lenet1", s, x) for s, x in enumerate(b)]}
    diff = next(v for v in seed_tables.seeds(study) if v.title == "Across seeds: framework differences")
    lo, hi = ref.confidence_interval(0.95)
    assert diff.rows == [["lenet1", "mnist", "torch − keras", "+6.8", f"[{100 * lo:+.1f}, {100 * hi:+.1f}]", f"{ref.pvalue:.3f}",
                          "significant"]]


def test_no_significant_difference_refutes_only_when_the_seeds_rule_out_a_point():
    """Frameworks whose seeds agree closely refute "the same configuration gives different accuracy" (every
    pair's 95 % interval within ±1 point); seeds as spread as an LSTM's decide nothing, though no pair is
    significant either."""
    from portability.study.findings import findings

    def verdict(torch, keras):
        study = {"rows": [_own("torch", "lenet5", s, x) for s, x in enumerate(torch)] +
                         [_own("keras", "lenet5", s, x) for s, x in enumerate(keras)]}
        study["across_seeds"] = stats.across_seeds(study)
        (d,) = study["across_seeds"]["framework_differences"]
        f = next(f for f in findings(study) if f["finding"].startswith("the same training"))
        return d["verdict"], f["verdict"]

    assert verdict([0.988, 0.990, 0.986], [0.987, 0.989, 0.988]) == ("within the seed spread", "refuted")
    assert verdict([0.70, 0.66, 0.68], [0.67, 0.69, 0.71]) == ("within the seed spread", "cannot decide")
