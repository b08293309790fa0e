"""Task accuracy on a labelled dataset: top-1 of the first class-score output against the labels."""
from __future__ import annotations

import numpy as np

from portability.metrics.base import Column, Moved, Plot, Threshold, number
from portability.metrics.drift import looks_like_scores, top1

FIELDS = {"accuracy": None, "accuracy_delta": None}
THRESHOLDS = {
    "accuracy_drop": Threshold(0.01, "--max-accuracy-drop", "largest accuracy fall with --dataset"),
}

#: what --baseline calls noise: accuracy must fall by more than this
TOLERANCES = {"accuracy_drop": 0.005}
#: the kinds of change its ``regressions`` report
REGRESSION_KINDS = ("accuracy",)


def compute(ev) -> tuple[dict, list[str]]:
    a = accuracy(ev.outputs, ev.labels, ev.score_name)
    ref = ev.reference_metrics.get("accuracy")
    delta = round(a - ref, 6) if a is not None and ref is not None and not ev.is_reference else None
    return {"accuracy": a, "accuracy_delta": delta}, []


def breaches(metrics: dict, t: dict) -> list[str]:
    delta = metrics.get("accuracy_delta")
    if t.get("accuracy_drop") is not None and delta is not None and -delta > t["accuracy_drop"]:
        return [f"accuracy fell by {-delta:.4f} > {t['accuracy_drop']}"]
    return []


def regressions(before, after, tol) -> list[Moved]:
    x, y = number((before.metrics or {}).get("accuracy")), number((after.metrics or {}).get("accuracy"))
    if x is None or y is None or abs(y - x) <= max(tol.accuracy_drop, 1e-12):
        return []
    return [Moved("accuracy", "accuracy", x, y, x - y > tol.accuracy_drop, f"accuracy {x:.4f} → {y:.4f} ({y - x:+.4f})")]


def _cell(t, medium: str) -> str:
    m = t.metrics or {}
    acc, delta = m.get("accuracy"), m.get("accuracy_delta")
    if acc is None:
        return "–"
    cut = (getattr(t, "details", None) or {}).get("samples")
    if cut:  # compared on the first batches only: its accuracy is that subset's, its change the comparable one
        return f"{acc:.4f} (" + (f"{delta:+.4f} " if delta is not None else "") + f"on {cut['batches']}/{cut['of']})"
    # HTML shows every target's delta (the reference has none); the tables only a non-zero one
    shown = delta is not None if medium == "html" else bool(delta)
    return f"{acc:.4f}" + (f" ({delta:+.4f})" if shown else "")


COLUMNS = (Column("accuracy", _cell, headers={"html": "accuracy (Δ)"}),)


def score_output(outputs: dict[str, np.ndarray]) -> str | None:
    """The first output that looks like class scores ([batch, classes] floats)."""
    return next((n for n, a in outputs.items() if looks_like_scores(a)), None)


def accuracy(outputs: dict[str, np.ndarray], labels: np.ndarray | None, name: str | None) -> float | None:
    if labels is None or name is None or name not in outputs:
        return None
    pred = top1(outputs[name])
    y = labels.reshape(-1)
    if pred.size != y.size:
        return None
    return float(np.mean(pred == y))


def accuracy_plot(report, kit) -> str | None:
    """Task accuracy per target (with --dataset), else top-1 agreement with the reference, zoomed to the
    range the values span; the reference's value is the dashed line."""
    key = "accuracy" if any((t.metrics or {}).get("accuracy") is not None for t in report.targets) else "top1_agreement"
    rows = [(t.id, kit.finite((t.metrics or {}).get(key)), t) for t in report.targets]
    rows = [r for r in rows if r[1] is not None]
    if not rows:
        return None
    fig, ax = kit.figure(len(rows))
    vals = [v for _, v, _ in rows]
    ax.barh(range(len(rows)), vals, color=[kit.color(t) for _, _, t in rows], height=0.6)
    ref = next((v for tid, v, _ in rows if tid == report.reference), None)
    if ref is not None and key == "accuracy":
        ax.axvline(ref, color=kit.REFERENCE_COLOR, linestyle="--", linewidth=1)
    lo = min(vals)
    ax.set_xlim(max(0.0, lo - max(0.02, (1 - lo) * 0.5)), 1.0)
    for y, v in enumerate(vals):
        ax.text(v, y, f" {v:.4f}", va="center", ha="right", fontsize=8, color="white")
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("accuracy on the labelled data (dashed: the reference)" if key == "accuracy"
                  else "top-1 agreement with the reference (no labelled data: --dataset adds accuracy)")
    ax.grid(axis="x", alpha=0.3)
    return kit.svg(fig, "accuracy per target" if key == "accuracy" else "top-1 agreement per target")


PLOTS = (Plot("Accuracy per target", accuracy_plot, order=40),)
