"""The HTML report's plots, drawn by matplotlib and returned as inline SVG (text, no file, no font or
script fetched): drift per target (log scale), latency distribution per target, size per variant,
accuracy (or top-1 agreement) per target. A plot with nothing to show returns None.

matplotlib is imported inside each function: importing this module stays light.
"""
from __future__ import annotations

import io
import math
import re

from portability.report.schema import Report, TargetResult

STATUS_COLOR = {"pass": "#2e7d32", "drift": "#c62828", "fallback": "#ef6c00", "skipped": "#9e9e9e"}
ERROR_COLOR = "#b71c1c"
REFERENCE_COLOR = "#1565c0"
#: where a zero (bit-identical) drift is drawn on the log axis
ZERO_FLOOR = 1e-12


def _color(t: TargetResult) -> str:
    return STATUS_COLOR.get(t.status, ERROR_COLOR)


def _figure(n_rows: int, width: float = 7.5):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, max(1.6, 0.9 + 0.32 * n_rows)), dpi=96, layout="constrained")
    return fig, fig.add_subplot()


def _svg(fig, title: str) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "portability"}):
        fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML declaration and DOCTYPE: the SVG sits inside HTML
    # a fixed width/height in pt would overflow a narrow window: let CSS size it, keep the aspect ratio
    svg = re.sub(r'<svg([^>]*?) width="[\d.]+pt" height="[\d.]+pt"', r'<svg\1', svg, count=1)
    return svg.replace("<svg", f'<svg role="img" aria-label="{title}"', 1)


def _finite(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def drift_plot(report: Report) -> str | None:
    """Worst absolute difference from the reference per target and output, on a log axis, with each
    target's max_abs threshold marked."""
    rows = []
    for t in report.targets:
        for name, o in ((t.metrics or {}).get("outputs") or {}).items():
            v = o.get("max_abs")
            v = math.inf if v in ("inf", "nan") else _finite(v)
            if v is not None:
                rows.append((f"{t.id} · {name}" if len((t.metrics or {}).get("outputs")) > 1 else t.id, v, t))
    if not rows:
        return None
    fig, ax = _figure(len(rows))
    top = max([v for _, v, _ in rows if math.isfinite(v)] + [1.0]) * 10
    ys = range(len(rows))
    vals = [top if not math.isfinite(v) else max(v, ZERO_FLOOR) for _, v, _ in rows]
    ax.barh(ys, vals, color=[_color(t) for _, _, t in rows], height=0.6)
    for y, (_, v, t) in zip(ys, rows):
        thr = _finite((t.thresholds or {}).get("max_abs"))
        if thr:
            ax.plot([thr, thr], [y - 0.4, y + 0.4], color="black", linewidth=1.5)
        if v == 0 or not math.isfinite(v):
            ax.text(ZERO_FLOOR * 2 if v == 0 else top, y, " identical" if v == 0 else " NaN/Inf", va="center",
                    ha="left" if v == 0 else "right", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(ZERO_FLOOR, top)
    ax.set_yticks(list(ys), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("max |output − reference| (log scale; black tick: threshold)")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, "drift per target")


def latency_plot(report: Report) -> str | None:
    """Box plot of every timed run per target (log axis), the reference in blue; emulated timings are
    labelled as such."""
    rows = []
    for t in report.targets:
        lat = (t.metrics or {}).get("latency_ms") or {}
        s = [x for x in (lat.get("samples") or []) if _finite(x) is not None and x > 0]
        if s:
            label = t.id + (" (emulated)" if lat.get("emulated") else "") + (" — reference" if t.id == report.reference else "")
            rows.append((label, s, t))
    if not rows:
        return None
    fig, ax = _figure(len(rows))
    parts = ax.boxplot([s for _, s, _ in rows], orientation="horizontal", widths=0.6, patch_artist=True,
                       showfliers=True, flierprops={"markersize": 2, "alpha": 0.5})
    for box, (_, _, t) in zip(parts["boxes"], rows):
        box.set_facecolor(REFERENCE_COLOR if t.id == report.reference else "#90a4ae")
        box.set_alpha(0.8)
    ax.set_yticks(range(1, len(rows) + 1), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds per inference, every timed run (log scale; blue: the reference)")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, "latency distribution per target")


def size_plot(report: Report) -> str | None:
    """Artifact size per format and variant (each distinct artifact once), raw and gzipped, with the
    source model's size marked."""
    seen: dict[str, tuple[str, list[str], int, int | None]] = {}
    for t in report.targets:
        a = t.artifact or {}
        if a.get("size_bytes"):
            entry = seen.setdefault(a.get("sha256") or t.id, (a.get("format", "?"), [], int(a["size_bytes"]), a.get("gzip_bytes")))
            entry[1].append(t.id.split("/", 1)[-1])
    if not seen:
        return None
    # one bar per distinct artifact, named by its format and the first target that runs it (+ how many more)
    rows = [(f"{fmt}: {names[0]}" + (f" +{len(names) - 1}" if len(names) > 1 else ""), size, gz)
            for fmt, names, size, gz in seen.values()]
    fig, ax = _figure(len(rows))
    ys = list(range(len(rows)))
    ax.barh([y - 0.18 for y in ys], [r[1] / 1024 for r in rows], height=0.36, color="#5c6bc0", label="file")
    ax.barh([y + 0.18 for y in ys], [(r[2] or 0) / 1024 for r in rows], height=0.36, color="#9fa8da", label="gzip")
    src = report.model.get("size_bytes")
    if src:
        ax.axvline(src / 1024, color="black", linestyle="--", linewidth=1, label="source model")
    ax.set_yticks(ys, [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("KB")
    fig.legend(fontsize=8, loc="outside upper right", ncols=3, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, "size per format and variant")


def accuracy_plot(report: Report) -> str | None:
    """Task accuracy per target (with --dataset), else top-1 agreement with the reference, zoomed to the
    range the values span; the reference's value is the dashed line."""
    key = "accuracy" if any((t.metrics or {}).get("accuracy") is not None for t in report.targets) else "top1_agreement"
    rows = [(t.id, _finite((t.metrics or {}).get(key)), t) for t in report.targets]
    rows = [r for r in rows if r[1] is not None]
    if not rows:
        return None
    fig, ax = _figure(len(rows))
    vals = [v for _, v, _ in rows]
    ax.barh(range(len(rows)), vals, color=[_color(t) for _, _, t in rows], height=0.6)
    ref = next((v for tid, v, _ in rows if tid == report.reference), None)
    if ref is not None and key == "accuracy":
        ax.axvline(ref, color=REFERENCE_COLOR, linestyle="--", linewidth=1)
    lo = min(vals)
    ax.set_xlim(max(0.0, lo - max(0.02, (1 - lo) * 0.5)), 1.0)
    for y, v in enumerate(vals):
        ax.text(v, y, f" {v:.4f}", va="center", ha="right", fontsize=8, color="white")
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("accuracy on the labelled data (dashed: the reference)" if key == "accuracy"
                  else "top-1 agreement with the reference (no labelled data: --dataset adds accuracy)")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, "accuracy per target" if key == "accuracy" else "top-1 agreement per target")


def _robustness_plot(report: Report, key: str, label: str, title: str) -> str | None:
    """One panel per perturbation family or attack: ``key`` against the level, one line per target."""
    from portability.metrics.robustness import curves

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
    return _svg(fig, title)


def robustness_accuracy_plot(report: Report) -> str | None:
    """Accuracy on perturbed and adversarial inputs against the level (labelled data only)."""
    return _robustness_plot(report, "accuracy", "accuracy (dashed: the reference)", "accuracy under perturbation")


def robustness_flip_plot(report: Report) -> str | None:
    """Flip rate against the reference on the same perturbed inputs, against the level."""
    return _robustness_plot(report, "flip_rate", "flip rate vs the reference", "flip rate under perturbation")


PLOTS = (("Drift per target", drift_plot), ("Latency per target", latency_plot),
         ("Size per format and variant", size_plot), ("Accuracy per target", accuracy_plot),
         ("Robustness: accuracy against the perturbation level", robustness_accuracy_plot),
         ("Robustness: flip rate against the reference", robustness_flip_plot))


def all_plots(report: Report) -> list[tuple[str, str | None]]:
    """(title, svg or None) for every plot, in the order the report shows them."""
    return [(title, fn(report)) for title, fn in PLOTS]
