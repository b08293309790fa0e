"""Across seeds: each (framework, model, dataset) trained with several seeds (``study --seeds N``) gives a
mean and a standard deviation per cell, and a difference between two frameworks is called significant only
beyond the seed spread.

- ``cells``: per (framework, model, dataset): the framework's own accuracy (eval samples) over the seeds
  (``mean``, ``std`` — the sample standard deviation, n - 1 —, ``n``, ``values``), and per target the
  deployed accuracy and its change against the framework's own, likewise.
- ``same_weights`` (``study --same-weights``): per (model, dataset) and framework holding PyTorch's weights,
  over the seeds: its own accuracy, PyTorch's, their difference, the worst logit difference and the top-1
  agreement against PyTorch on the same samples before any export, and per target the deployed accuracy
  next to PyTorch's deployed model's.
- ``framework_differences``: per (model, dataset) and pair of frameworks, the difference of mean accuracy,
  Welch's t-test (unequal variances) over the seeds and the difference's 95 % confidence interval
  (``ci95``: a difference outside it is ruled out by the seeds); ``significant`` when p < 0.05, and never
  with fewer than two seeds on a side (the spread is unknown: ``undecided``).
"""
from __future__ import annotations

import math
from itertools import combinations

TEST = "Welch's t-test (unequal variances) on the framework's own accuracy across seeds, p < 0.05"
ALPHA = 0.05


def summary(values: list[float]) -> dict:
    v = [float(x) for x in values if x is not None and math.isfinite(float(x))]
    n = len(v)
    mean = sum(v) / n if n else None
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1)) if n > 1 else None
    return {"mean": mean, "std": std, "n": n, "values": v}


def own_rows(study: dict) -> list[dict]:
    """The rows of models trained in their own framework (not the same-weights experiment's)."""
    return [r for r in study["rows"] if r.get("weights", "own") == "own"]


def _key(r: dict) -> tuple[str, str, str]:
    return r["framework"], r["arch"], r["dataset"]


def cells(study: dict) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in own_rows(study):
        groups.setdefault(_key(r), []).append(r)
    out = []
    for (fw, arch, d), rows in groups.items():
        trained = [r for r in rows if (r.get("training") or {}).get("status") == "ok"]
        targets: dict[str, dict] = {}
        for tid in dict.fromkeys(t["id"] for r in trained for t in r["targets"]):
            ts = [t for r in trained for t in r["targets"] if t["id"] == tid]
            targets[tid] = {"accuracy": summary([t.get("accuracy") for t in ts]),
                            "accuracy_vs_framework": summary([t.get("accuracy_vs_framework") for t in ts]),
                            "statuses": status_counts(ts)}
        out.append({"framework": fw, "arch": arch, "dataset": d, "seeds": [r["seed"] for r in rows],
                    "accuracy": summary([(r.get("baseline") or {}).get("accuracy") for r in trained]), "targets": targets})
    return out


def welch(a: list[float], b: list[float]) -> dict:
    """Welch's t statistic, its degrees of freedom, two-sided p and the 95 % confidence interval of the
    difference of means ``ci95`` (what the seeds rule out; None when either side has < 2 values)."""
    if len(a) < 2 or len(b) < 2:
        return {"t": None, "df": None, "p": None, "ci95": None}
    sa, sb = summary(a), summary(b)
    diff = sa["mean"] - sb["mean"]
    va, vb = sa["std"] ** 2 / len(a), sb["std"] ** 2 / len(b)
    if va + vb == 0:
        return {"t": None, "df": None, "p": 0.0 if diff else 1.0, "ci95": [diff, diff]}
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0))
    from scipy import stats

    half = float(stats.t.ppf(1 - ALPHA / 2, df)) * math.sqrt(va + vb)
    return {"t": t, "df": df, "p": float(2 * stats.t.sf(abs(t), df)), "ci95": [diff - half, diff + half]}


def framework_differences(cs: list[dict]) -> list[dict]:
    by: dict[tuple, dict[str, dict]] = {}
    for c in cs:
        by.setdefault((c["arch"], c["dataset"]), {})[c["framework"]] = c
    out = []
    for (arch, d), fws in by.items():
        for a, b in combinations(fws, 2):
            xa, xb = fws[a]["accuracy"], fws[b]["accuracy"]
            if not xa["n"] or not xb["n"]:
                continue
            w = welch(xa["values"], xb["values"])
            verdict = "undecided" if w["p"] is None else ("significant" if w["p"] < ALPHA else "within the seed spread")
            out.append({"arch": arch, "dataset": d, "frameworks": [a, b], "difference": xa["mean"] - xb["mean"],
                        **w, "verdict": verdict, "test": TEST})
    return out


def across_seeds(study: dict) -> dict:
    """The study JSON's ``seeds`` section."""
    cs = cells(study)
    return {"cells": cs, "framework_differences": framework_differences(cs), "test": TEST}


SAME_WEIGHTS = ("PyTorch's trained weights loaded into the framework's definition of the same architecture (layouts "
                "converted, no training), evaluated in that framework on the same samples as PyTorch's model")


def same_weights(study: dict) -> dict:
    """The study JSON's ``same_weights`` section: per (model, dataset, framework) over the seeds, the
    framework's accuracy with PyTorch's weights against PyTorch's own, their logits' worst difference and
    top-1 agreement before any export, and per target the deployed accuracy beside PyTorch's (same seed)."""
    torch_rows = {(r["arch"], r["dataset"], r["seed"]): r for r in own_rows(study) if r["framework"] == "torch"}
    groups: dict[tuple, list[dict]] = {}
    for r in study["rows"]:
        if r.get("weights") == "torch" and r.get("same_weights"):
            groups.setdefault((r["arch"], r["dataset"], r["framework"]), []).append(r)
    out = []
    for (arch, d, fw), rows in groups.items():
        sw = [r["same_weights"] for r in rows]
        src = [torch_rows.get((arch, d, r["seed"])) for r in rows]
        targets = {}
        for tid in dict.fromkeys(t["id"] for r in rows for t in r["targets"]):
            mine = [t for r in rows for t in r["targets"] if t["id"] == tid]
            theirs = [t for s in src if s for t in s["targets"] if t["id"] == tid]
            # a slow target may be compared on fewer samples, not the same number in each row: the change
            # against the row's own framework on those samples is what compares across rows
            targets[tid] = {"accuracy": summary([t.get("accuracy") for t in mine]),
                            "accuracy_torch": summary([t.get("accuracy") for t in theirs]),
                            "change": summary([t.get("accuracy_vs_framework") for t in mine]),
                            "change_torch": summary([t.get("accuracy_vs_framework") for t in theirs]),
                            "statuses": status_counts(mine), "statuses_torch": status_counts(theirs)}
        diffs = [x["accuracy"] - x["accuracy_source"] for x in sw
                 if isinstance(x.get("accuracy"), (int, float)) and isinstance(x.get("accuracy_source"), (int, float))]
        worst = [x["max_abs_vs_source"] for x in sw if isinstance(x.get("max_abs_vs_source"), (int, float))]
        out.append({"arch": arch, "dataset": d, "framework": fw, "weights_from": "torch", "seeds": [r["seed"] for r in rows],
                    "accuracy": summary([x.get("accuracy") for x in sw]),
                    "accuracy_torch": summary([x.get("accuracy_source") for x in sw]),
                    "difference": summary(diffs), "max_abs_vs_torch": max(worst) if worst else None,
                    "top1_agreement_vs_torch": summary([x.get("top1_agreement_vs_source") for x in sw]),
                    "targets": targets})
    return {"what": SAME_WEIGHTS, "cells": out}


def at_largest_epsilon(attacks: dict, name: str, key: str) -> float | None:
    """``key`` of attack ``name``'s row at its largest ε (a robustness report's ``adversarial.attacks``)."""
    rows = (attacks or {}).get(name) or []
    top = max(rows, key=lambda a: a["epsilon"]) if rows else None
    v = (top or {}).get(key)
    return float(v) if isinstance(v, (int, float)) else None


def status_counts(targets: list[dict]) -> dict[str, int]:
    return {s: sum(1 for t in targets if t["status"] == s) for s in dict.fromkeys(t["status"] for t in targets)}


def robustness_moves(study: dict) -> dict:
    """How robustness moved on deployment, per framework × platform (the own-weights rows, every model and
    seed): each target's worst flip rate under random perturbations (its top-1 against the reference's on
    the same perturbed input) and, per attack crafted on the source, its success rate minus the reference's
    at the largest ε (positive: the deployed model is easier to fool)."""
    groups: dict[tuple[str, str], dict[str, list]] = {}
    for r in own_rows(study):
        for t in r["targets"]:
            rb = t.get("robustness")
            if t["id"] == r.get("reference") or not isinstance(rb, dict) or not rb.get("available"):
                continue
            g = groups.setdefault((r["framework"], t.get("platform") or t["id"].split("/")[0]),
                                  {"flip": [], "fgsm": [], "pgd": [], "targets": []})
            g["targets"].append(f"{r['arch']}/s{r['seed']}/{t['id']}")
            if isinstance(rb.get("worst_flip_rate"), (int, float)):
                g["flip"].append(rb["worst_flip_rate"])
            attacks = (rb.get("adversarial") or {}).get("attacks") or {}
            for name in ("fgsm", "pgd"):
                d = at_largest_epsilon(attacks, name, "success_rate_delta")
                if d is not None:
                    g[name].append(d)
    out = []
    for (fw, platform), g in groups.items():
        worst = max(g["flip"]) if g["flip"] else None
        out.append({"framework": fw, "platform": platform, "measured": len(g["targets"]),
                    "flip_rate": {**summary(g["flip"]), "max": worst},
                    **{f"{a}_success_delta": {**summary(g[a]), "min": min(g[a]) if g[a] else None,
                                              "max": max(g[a]) if g[a] else None} for a in ("fgsm", "pgd")}})
    return {"what": "per framework × platform, over every model, seed and target that measured robustness: the worst flip "
                    "rate under random perturbations, and the attacks' success rate minus the reference's at the largest ε",
            "cells": out}
