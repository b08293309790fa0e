"""The seed paper's findings, each given a verdict from the study's own numbers.

The founding experiment (Guo et al., "An Empirical Study towards Characterizing Deep Learning Development
and Deployment across Different Frameworks and Platforms", ASE 2019) reported that the same model differs
across frameworks — under the same training configuration, and even with the same weights — in accuracy
and in adversarial robustness, and that migrating and quantizing models for mobile and web devices suffers
from compatibility and reliability problems and costs time. Each finding here is ``confirmed``,
``refuted`` or ``cannot decide`` by a rule stated with it, and carries the numbers the rule read. Computed
from the study's JSON alone (the own-weights rows, and the ``same_weights`` section).
"""
from __future__ import annotations

from portability.core.status import COMPARED, ERRORS, Status
from portability.study.stats import ALPHA, at_largest_epsilon, own_rows, summary, welch

FAILED = ERRORS
QUANTIZED = ("int8", "qdq", "fp16", "dynint8")


#: how close two frameworks must provably be to refute "they differ": each pair's 95 % confidence interval
#: within this many points of accuracy (of PGD success: 64 attacked samples move it in steps of 1.6 points)
MARGIN = {"accuracy": 0.01, "pgd": 0.05}


def _verdict_by_tests(tests: list[dict], margin: float) -> str:
    """``confirmed`` when a difference is significant; ``refuted`` when every pair was tested and each one's
    95 % confidence interval lies within ±``margin`` (an equivalence test: a difference of that size is ruled
    out); ``cannot decide`` otherwise — fewer than two seeds on a side, or seeds too few or too spread to
    rule out a difference of that size."""
    if any(t["p"] is not None and t["p"] < ALPHA for t in tests):
        return "confirmed"
    if tests and all(_within(t, margin) for t in tests):
        return "refuted"
    return "cannot decide"


def _within(test: dict, margin: float) -> bool:
    ci = test.get("ci95")
    return bool(ci) and -margin <= ci[0] and ci[1] <= margin


def _p_ci(w: dict) -> str:
    """p of a Welch test and the difference's 95 % confidence interval, in points."""
    p = "–" if w.get("p") is None else format(w["p"], ".3f")
    ci = w.get("ci95")
    return f"p {p}" + (f", 95 % CI [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if ci else "")


def same_configuration(study: dict) -> dict:
    diffs = (study.get("across_seeds") or {}).get("framework_differences") or []
    sig = [d for d in diffs if d.get("verdict") == "significant"]
    return {"finding": "the same training configuration gives different accuracy in different frameworks",
            "rule": f"Welch's t-test over the seeds on each pair of frameworks' own accuracy; confirmed when one pair "
                    f"differs at p < {ALPHA}; refuted when every pair's 95 % confidence interval lies within "
                    f"±{100 * MARGIN['accuracy']:.0f} point (a larger difference ruled out); cannot decide otherwise",
            "verdict": _verdict_by_tests(diffs, MARGIN["accuracy"]),
            # the significant pairs, or first those the seeds cannot tell apart within the margin
            "numbers": [f"{d['arch']}: {' − '.join(d['frameworks'])} {100 * d['difference']:+.1f} points ({_p_ci(d)})"
                        for d in (sig or sorted(diffs, key=lambda d: _within(d, MARGIN["accuracy"])))]}


def same_weights(study: dict) -> dict:
    cells = (study.get("same_weights") or {}).get("cells") or []
    base = {"finding": "the same weights give different predictions in different frameworks",
            "rule": "each framework holding PyTorch's trained weights, on the same samples before any export: confirmed "
                    "when its accuracy differs from PyTorch's or a top-1 prediction does"}
    if not cells:
        asked = (study.get("options") or {}).get("same_weights")
        return {**base, "verdict": "cannot decide",
                "numbers": ["no same-weights row finished yet" if asked else "no same-weights rows (study --same-weights)"]}
    moved = [c for c in cells if (c["difference"].get("n") and any(v != 0 for v in c["difference"]["values"]))
             or any(v < 1 for v in c["top1_agreement_vs_torch"].get("values") or [])]
    nums = [f"{c['arch']} in {c['framework']}: worst |Δ logit| {c['max_abs_vs_torch']:.1e}, top-1 agreement "
            f"{100 * min(c['top1_agreement_vs_torch']['values']):.1f} % at worst, accuracy "
            f"{100 * c['difference']['mean']:+.2f} points (n={c['difference']['n']})"
            for c in cells if c["top1_agreement_vs_torch"].get("values") and c["max_abs_vs_torch"] is not None]
    return {**base, "verdict": "confirmed" if moved else "refuted", "numbers": nums}


def _attack_success(row: dict, attack: str) -> float | None:
    ref = next((t for t in row["targets"] if t["id"] == row.get("reference")), None)
    rb = (ref or {}).get("robustness") or {}
    return at_largest_epsilon((rb.get("adversarial") or {}).get("attacks"), attack, "success_rate")


def robustness(study: dict) -> dict:
    """The frameworks' own models against PGD at the largest ε (on the reference: the framework's runtime)."""
    by: dict[tuple, dict[str, list[float]]] = {}
    for r in own_rows(study):
        v = _attack_success(r, "pgd")
        if v is not None:
            by.setdefault((r["arch"], r["dataset"]), {}).setdefault(r["framework"], []).append(v)
    tests, nums = [], []
    for (arch, _), fws in by.items():
        names = list(fws)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                w = welch(fws[a], fws[b])
                tests.append(w)
                sa, sb = summary(fws[a]), summary(fws[b])
                nums.append(f"{arch}: PGD success {a} {100 * sa['mean']:.1f} % vs {b} {100 * sb['mean']:.1f} % ({_p_ci(w)})")
    unmeasured = sorted({r["framework"] for r in own_rows(study)} - {fw for fws in by.values() for fw in fws})
    nums += [f"{fw}: not attacked (its model reaches check as ONNX: no gradients to craft with)" if fw == "mxnet"
             else f"{fw}: not attacked" for fw in unmeasured if by]
    return {"finding": "adversarial robustness differs between frameworks",
            "rule": f"PGD success at the largest ε on each framework's own model, Welch's t-test over the seeds per pair; "
                    f"confirmed when one pair differs at p < {ALPHA}; refuted when every pair's 95 % confidence interval "
                    f"lies within ±{100 * MARGIN['pgd']:.0f} points; cannot decide otherwise",
            "verdict": _verdict_by_tests(tests, MARGIN["pgd"]) if tests else "cannot decide",
            "numbers": nums or ["robustness was not measured (study --robustness)"]}


def deployment(study: dict) -> dict:
    """Conversions and runs that fail, per platform, and accuracy lost by targets that ran."""
    per: dict[str, dict[str, int]] = {}
    worst: dict[str, float] = {}
    for r in own_rows(study):
        for t in r["targets"]:
            if t["id"] == r.get("reference") or t["status"] == Status.SKIPPED:
                continue
            plat = t.get("platform") or t["id"].split("/")[0]
            p = per.setdefault(plat, {"targets": 0, "failed": 0, "drift": 0})
            p["targets"] += 1
            p["failed"] += t["status"] in FAILED
            p["drift"] += t["status"] == Status.DRIFT
            d = t.get("accuracy_vs_framework")
            if isinstance(d, (int, float)):
                worst[plat] = min(worst.get(plat, 0.0), d)
    nums = [f"{k}: {v['failed']} of {v['targets']} target runs failed, {v['drift']} drifted; worst accuracy change "
            f"{100 * worst.get(k, 0.0):+.1f} points" for k, v in per.items()]
    failed = sum(v["failed"] for k, v in per.items() if k in ("web", "mobile"))
    return {"finding": "migrating models to mobile and web devices suffers from compatibility and reliability problems",
            "rule": "confirmed when a conversion or a run fails on a web or mobile target (skips — a runtime absent "
                    "here — are not counted)",
            "verdict": "confirmed" if failed else ("refuted" if per else "cannot decide"), "numbers": nums}


def quantization(study: dict) -> dict:
    changes: dict[str, list[float]] = {}
    for r in own_rows(study):
        for t in r["targets"]:
            variant = next((q for q in QUANTIZED if t["id"].endswith("-" + q)), None)
            d = t.get("accuracy_vs_framework")
            if variant and t["status"] in COMPARED and isinstance(d, (int, float)):
                changes.setdefault(t["id"], []).append(d)
    nums = [f"{tid}: {100 * summary(v)['mean']:+.2f} points mean, {100 * min(v):+.1f} worst (n={len(v)})"
            for tid, v in sorted(changes.items())]
    worst = min((min(v) for v in changes.values()), default=None)
    return {"finding": "quantizing a model for a device loses accuracy",
            "rule": "the accuracy of quantized targets (int8, dynamic int8, float16) against the framework's own; confirmed "
                    "when one loses more than 1 point on some model",
            "verdict": "cannot decide" if worst is None else ("confirmed" if worst < -0.01 else "refuted"), "numbers": nums}


def web_speed(study: dict) -> dict:
    ratios = []
    for r in own_rows(study):
        ts = {t["id"]: t for t in r["targets"]}
        web, native = ts.get("web/ort-wasm") or {}, ts.get("server/ort-cpu") or {}
        if isinstance(web.get("p50_ms"), (int, float)) and isinstance(native.get("p50_ms"), (int, float)) and native["p50_ms"] > 0:
            ratios.append((r["arch"], web["p50_ms"] / native["p50_ms"]))
    by: dict[str, list[float]] = {}
    for arch, x in ratios:
        by.setdefault(arch, []).append(x)
    nums = [f"{arch}: ONNX Runtime Web (WebAssembly) p50 {sorted(v)[len(v) // 2]:.1f}× native ONNX Runtime's (median of {len(v)})"
            for arch, v in by.items()]
    med = sorted(x for _, x in ratios)[len(ratios) // 2] if ratios else None
    return {"finding": "a model in the browser is slower than the same model natively",
            "rule": "p50 latency of ONNX Runtime Web (WebAssembly) against native ONNX Runtime on the same model; confirmed "
                    "when the median ratio exceeds 1",
            "verdict": "cannot decide" if med is None else ("confirmed" if med > 1 else "refuted"), "numbers": nums}


def findings(study: dict) -> list[dict]:
    """The study JSON's ``findings``: each of the seed paper's findings with its verdict, rule and numbers."""
    return [f(study) for f in (same_configuration, same_weights, robustness, deployment, quantization, web_speed)]
