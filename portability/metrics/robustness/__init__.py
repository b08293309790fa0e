"""Robustness (``--robustness``): how a target's predictions hold up on perturbed and adversarial inputs,
next to the reference's predictions on the very same inputs.

Per perturbation family and level (``metrics.robustness.perturb``): ``accuracy`` (labelled data only), ``flip_rate``
(the share of perturbed samples whose top-1 class differs from the reference's top-1 on the same
perturbed input; null for the reference itself) and ``changed`` (the share whose top-1 differs from this
target's own clean prediction). ``first_disagreement``: per family, the smallest level with a flip rate
above zero. Adversarial examples (FGSM, PGD, crafted on the source model: ``metrics.robustness.adversarial``) give
per ε the ``success_rate`` (see ``adversarial.success``) and its difference from the reference's.

Reported, never gating: no default threshold.
"""
from __future__ import annotations

import numpy as np

from portability.metrics.base import Column, Plot, Section, fmt
from portability.metrics.drift import top1

FIELDS = {"robustness": None}
THRESHOLDS: dict = {}
ADVERSARIAL = ("fgsm", "pgd")


def compute(ev) -> tuple[dict, list[str]]:
    ps = ev.perturbed
    if ps is None:
        return {}, []
    return {"robustness": summarize(ev)}, []


def breaches(metrics: dict, t: dict) -> list[str]:
    return []


def _unavailable(reason: str) -> dict:
    return {"available": False, "reason": reason}


def _preds(arr, groups: int) -> np.ndarray | None:
    """Top-1 per sample, ``[groups, samples]``; None when the output holds no class scores."""
    if not isinstance(arr, np.ndarray) or arr.dtype.kind != "f" or arr.ndim < 2 or arr.shape[-1] < 2:
        return None
    p = top1(arr)
    return p.reshape(groups, -1) if p.size % max(groups, 1) == 0 else None


def _rate(mask: np.ndarray) -> float:
    return round(float(np.mean(mask)), 6)


def summarize(ev) -> dict:
    """The ``robustness`` metrics of one target (see the module docstring)."""
    ps, name = ev.perturbed, ev.score_name
    skipped = (ev.worker.details or {}).get("robustness_skipped")  # the worker did not run the set: why
    if skipped:
        return _unavailable(skipped)
    if not ps.groups:
        return _unavailable("no input can be perturbed (only float and integer-id inputs are)")
    if name is None:
        return _unavailable("no output looks like class scores ([batch, classes] floats): there is no prediction to flip")
    n_groups = len(ps.groups)
    got = _preds((ev.perturbed_outputs or {}).get(name), n_groups)
    own_clean = _preds(_first(ev.outputs.get(name), ps.batches), 1)
    ref_out = ev.reference_perturbed if not ev.is_reference else ev.perturbed_outputs
    ref = _preds((ref_out or {}).get(name), n_groups)
    ref_clean = _preds(_first((ev.reference or ev.outputs).get(name), ps.batches), 1)
    if got is None or own_clean is None or ref is None or ref_clean is None or got.shape != ref.shape \
            or got.shape[1] != own_clean.shape[1]:
        return _unavailable(f"output '{name}' gave no class scores of the expected shape on the perturbed inputs")
    y = None if ps.labels is None else np.asarray(ps.labels).reshape(-1)
    if y is not None and y.size != got.shape[1]:
        y = None
    is_ref = ev.is_reference
    out: dict = {"available": True, "samples": int(got.shape[1]), "score_output": name,
                 "clean": {"accuracy": _rate(own_clean[0] == y) if y is not None else None,
                           "flip_rate": None if is_ref else _rate(own_clean[0] != ref_clean[0])}}
    fams: dict[str, list[dict]] = {}
    attacks: dict[str, list[dict]] = {}
    truth = y if y is not None else ref_clean[0]
    for i, g in enumerate(ps.groups):
        row = {"level": g.level, "accuracy": _rate(got[i] == y) if y is not None else None,
               "flip_rate": None if is_ref else _rate(got[i] != ref[i]), "changed": _rate(got[i] != own_clean[0])}
        if g.family in ADVERSARIAL:
            sr, ref_sr = _rate(got[i] != truth), _rate(ref[i] != truth)
            attacks.setdefault(g.family, []).append(
                {"epsilon": g.level, "success_rate": sr, "reference_success_rate": ref_sr,
                 "success_rate_delta": round(sr - ref_sr, 6), "accuracy": row["accuracy"], "flip_rate": row["flip_rate"]})
        else:
            fams.setdefault(g.family, []).append(row)
    out["perturbations"] = fams
    flips = [r["flip_rate"] for rs in fams.values() for r in rs if r["flip_rate"] is not None]
    out["worst_flip_rate"] = max(flips) if flips else None
    out["first_disagreement"] = None if is_ref else {
        f: next((r["level"] for r in sorted(rs, key=lambda r: r["level"]) if r["flip_rate"]), None) for f, rs in fams.items()}
    adv = dict(ev.adversarial or _unavailable("not crafted"))
    if adv.get("available"):
        adv["success"] = ("the prediction differs from the true label" if y is not None else
                          "the prediction differs from the reference's prediction on the clean input (no labels)")
        adv["attacks"] = attacks
    out["adversarial"] = adv
    return out


def _first(arr, batches: int):
    return arr[:batches] if isinstance(arr, np.ndarray) else None


def worst_flip(metrics: dict) -> float | None:
    """The largest flip rate over the random perturbations (the terminal table's column); attacks apart."""
    r = metrics.get("robustness") or {}
    return r.get("worst_flip_rate") if r.get("available") else None


def curves(metrics: dict) -> dict[str, list[dict]]:
    """Per family (perturbations, then attacks): rows of ``level``, ``accuracy``, ``flip_rate`` — what
    the plots and tables draw. Empty when the target has no robustness."""
    r = metrics.get("robustness") or {}
    if not r.get("available"):
        return {}
    out = {f: list(rows) for f, rows in (r.get("perturbations") or {}).items()}
    for attack, rows in ((r.get("adversarial") or {}).get("attacks") or {}).items():
        out[attack] = [{"level": a["epsilon"], "accuracy": a["accuracy"], "flip_rate": a["flip_rate"],
                        "success_rate": a["success_rate"]} for a in rows]
    return out


#: the columns of the robustness summary tables (Markdown, HTML)
SUMMARY_HEAD = ["target", "samples", "worst flip", "flips from (level)", "FGSM success", "PGD success"]


def summary(metrics: dict) -> list[str] | None:
    """A target's robustness in a few cells (after the target id): samples, worst flip rate over the
    random perturbations, the smallest level with a flip per family, and each attack's success rate at
    its largest ε (with its difference from the reference). None without robustness."""
    r = metrics.get("robustness")
    if not r:
        return None
    if not r.get("available"):
        return ["–", "not available: " + str(r.get("reason")), "", "", ""]
    first = r.get("first_disagreement") or {}
    flips = ", ".join(f"{f} {lv:g}" for f, lv in first.items() if lv is not None) or ("none" if first else "–")
    attacks = (r.get("adversarial") or {}).get("attacks") or {}

    def attack(name: str) -> str:
        rows = attacks.get(name)
        if not rows:
            return "–"
        a = max(rows, key=lambda x: x["epsilon"])
        return f"{a['success_rate']:.3f} ({a['success_rate_delta']:+.3f}) at ε {a['epsilon']:g}"

    worst = r.get("worst_flip_rate")
    return [str(r.get("samples")), "–" if worst is None else f"{worst:.3f}", flips, attack("fgsm"), attack("pgd")]


COLUMNS = (Column("worst flip", lambda t, medium: fmt(worst_flip(t.metrics or {}), ".3f", medium), media=("terminal",),
                  shown=lambda report: any((t.metrics or {}).get("robustness") for t in report.targets)),)


def _html(report, page) -> str:
    """The robustness summary per target, and what was perturbed; empty without ``--robustness``."""
    e = page.e
    rows = [[e(t.id)] + [e(c) for c in cells] for t in report.targets if (cells := summary(t.metrics or {}))]
    if not rows:
        return ""
    desc = (report.inputs or {}).get("robustness") or {}
    fams = "; ".join(f"{e(f)} {e(', '.join(f'{v:g}' for v in lv))}" for f, lv in (desc.get("families") or {}).items())
    adv = desc.get("adversarial") or {}
    adv_s = (f"adversarial: FGSM and PGD crafted on {e(adv.get('crafted_on'))}; success rate: the share of samples "
             f"whose prediction differs from the {e(adv.get('labels'))}" if adv.get("available")
             else f"adversarial: not available ({e(adv.get('reason'))})")
    return (f"<p class=meta>{e(desc.get('samples'))} samples, seed {e(desc.get('seed'))}; levels: {fams}. "
            f"Flip rate: the share of perturbed samples whose top-1 class differs from the reference's on the same "
            f"input. {adv_s}</p>" + page.table(SUMMARY_HEAD, rows))


def _markdown(report, page) -> str:
    rows = [(t.id, summary(t.metrics or {})) for t in report.targets]
    rows = [(tid, cells) for tid, cells in rows if cells]
    if not rows:
        return ""
    return "\n".join(["", "### Robustness", "", "| " + " | ".join(SUMMARY_HEAD) + " |", "|---|--:|--:|---|--:|--:|"]
                     + ["| " + " | ".join(page.cell(c) for c in [f"`{tid}`"] + cells) + " |" for tid, cells in rows])


SECTIONS = (Section("Robustness", _html, place="summary"), Section("Robustness", _markdown, medium="markdown"))


def _robustness_plot(report, kit, key: str, label: str, title: str) -> str | None:
    """One panel per perturbation family or attack: ``key`` against the level, one line per target."""
    per = {t.id: curves(t.metrics or {}) for t in report.targets}
    fams = list(dict.fromkeys(f for c in per.values() for f in c))
    fams = [f for f in fams if any(r.get(key) is not None for c in per.values() for r in c.get(f, ()))]
    if not fams:
        return None
    from matplotlib.figure import Figure

    cols = min(3, len(fams))
    nrows = -(-len(fams) // cols)
    fig = Figure(figsize=(7.5, 0.6 + 2.2 * nrows), dpi=96, layout="constrained")
    axes = fig.subplots(nrows, cols, squeeze=False)
    colors = ["#1565c0", "#2e7d32", "#c62828", "#ef6c00", "#6a1b9a", "#00838f", "#5d4037", "#ad1457", "#827717"]
    for i, fam in enumerate(fams):
        ax = axes[i // cols][i % cols]
        for j, t in enumerate(report.targets):
            rows = [r for r in per[t.id].get(fam, ()) if r.get(key) is not None]
            if not rows:
                continue
            rows.sort(key=lambda r: r["level"])
            ax.plot([r["level"] for r in rows], [r[key] for r in rows], marker="o", markersize=3, linewidth=1.2,
                    linestyle="--" if t.id == report.reference else "-", color=colors[j % len(colors)], label=t.id)
        ax.set_title(fam, fontsize=9)
        ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.03)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for k in range(len(fams), nrows * cols):
        axes[k // cols][k % cols].set_visible(False)
    fig.supxlabel("level (fraction of the input range; ε for attacks)", fontsize=8)
    fig.supylabel(label, fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="outside upper right", ncols=3, frameon=False)
    return kit.svg(fig, title)


def robustness_accuracy_plot(report, kit) -> str | None:
    """Accuracy on perturbed and adversarial inputs against the level (labelled data only)."""
    return _robustness_plot(report, kit, "accuracy", "accuracy (dashed: the reference)", "accuracy under perturbation")


def robustness_flip_plot(report, kit) -> str | None:
    """Flip rate against the reference on the same perturbed inputs, against the level."""
    return _robustness_plot(report, kit, "flip_rate", "flip rate vs the reference", "flip rate under perturbation")


PLOTS = (Plot("Robustness: accuracy against the perturbation level", robustness_accuracy_plot, order=50),
         Plot("Robustness: flip rate against the reference", robustness_flip_plot, order=51))
