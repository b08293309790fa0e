"""Numeric drift of a target's outputs against the reference's, per output, and top-1 agreement."""
from __future__ import annotations

import re

import math

import numpy as np

from portability.metrics.base import Column, Moved, Plot, Section, Threshold, fmt, number
from portability.metrics.bounds import CHECK, Breach, Judgement, Rule, bound, judge_output, within

FIELDS = {"outputs": {}, "top1_agreement": None}
THRESHOLDS = {
    "max_abs": Threshold(1e-4, "--max-abs", "largest absolute output difference, per unit of the output's largest "
                         "magnitude where that is over 1 (float rounding grows with the values rounded)"),
    #: the same in quantization steps of the output (quantized targets only)
    "max_abs_steps": Threshold(None),
    "cosine": Threshold(0.9999, "--cosine", "lowest cosine similarity per output", floor=True),
    "top1_agreement": Threshold(1.0, "--min-top1", "lowest top-1 agreement, the share of rows whose arg-max class matches the reference's",
                                floor=True),
}

#: what --baseline calls noise. A drift regression must pass both bounds: grow by more than ``drift_abs``
#: (None: a tenth of the target's max_abs threshold, at least 1e-6) and to more than ``drift_ratio`` times
#: the baseline's worst absolute difference; a cosine must fall by more than ``cosine_drop``, top-1
#: agreement by more than ``top1_drop``
TOLERANCES = {"drift_abs": None, "drift_ratio": 2.0, "cosine_drop": 1e-6, "top1_drop": 0.0}
#: the kinds of change its ``regressions`` report (``report.diff`` orders changes by every metric's kinds)
REGRESSION_KINDS = ("drift",)


def compute(ev) -> tuple[dict, list[str]]:
    """Per-output drift and top-1 agreement against the reference; structural problems as reasons."""
    if ev.is_reference:
        return {}, []
    per, agreement, problems = compare(ev.reference, ev.outputs, ev.worker.output_quant, list(ev.output_names))
    return {"outputs": per, "top1_agreement": agreement}, problems


def breaches(metrics: dict, t: dict) -> list[str]:
    return judge(t, stats=metrics.get("outputs") or {}, agreement=metrics.get("top1_agreement")).messages


def judge(t: dict, ref: dict | None = None, got: dict | None = None, *, stats: dict | None = None,
          agreement: float | None = None, rule: Rule = CHECK, quant: dict | None = None,
          tolerance: tuple[float, float] | None = None) -> Judgement:
    """The one comparison of outputs against thresholds ``t``: the reference's and the candidate's arrays
    (``ref``, ``got``: {name: array}, measured by ``compare``), or their per-output drift already measured
    (``stats``, with the top-1 ``agreement``). ``tolerance``: (rtol, atol), also judged like numpy's
    ``allclose`` (``|got - ref| <= atol + rtol * |ref|``, NaN equal to NaN), over every output."""
    problems: list[str] = []
    sizes: dict = {}
    if stats is None:
        stats, agreement, problems = compare(ref, got, quant)
        sizes = {k: np.size(ref[k]) for k in stats if not isinstance(ref[k], list)}
    found = [b for name, m in stats.items() for b in judge_output(name, m, t, rule, sizes.get(name))]
    limit = t.get("top1_agreement")
    if rule.top1 and limit is not None and agreement is not None and agreement < limit:
        found.append(Breach("top1_agreement", None, agreement, limit, f"top-1 agreement {agreement:.4f} < {limit}"))
    inside, worst_seen = within(ref, got, stats, *tolerance) if tolerance else (None, None)
    return Judgement(stats, agreement, tuple(problems), tuple(found), inside, worst_seen)


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def regressions(before, after, tol) -> list[Moved]:
    """Per output, a grown max_abs (or a shrunk one, as better) and a fallen cosine; then top-1 agreement."""
    a, b, thresholds = before.metrics or {}, after.metrics or {}, after.thresholds
    out = []
    if tol.drift_abs is not None:
        floor = tol.drift_abs
    else:
        thr = number((thresholds or {}).get("max_abs"))
        floor = max(1e-6, 0.1 * thr) if thr else 1e-6
    oa, ob = a.get("outputs") or {}, b.get("outputs") or {}
    for name in oa.keys() & ob.keys():
        x, y = number(oa[name].get("max_abs")), number(ob[name].get("max_abs"))
        if x is not None and y is not None and (math.isnan(y) or (y - x > floor and y > x * tol.drift_ratio)):
            out.append(Moved("drift", f"max_abs[{name}]", x, y, True, f"'{name}' max_abs {_fmt(x)} → {_fmt(y)}"))
        elif x is not None and y is not None and x - y > floor and x > y * tol.drift_ratio:
            out.append(Moved("drift", f"max_abs[{name}]", x, y, False, f"'{name}' max_abs {_fmt(x)} → {_fmt(y)} (better)"))
        x, y = number(oa[name].get("cosine")), number(ob[name].get("cosine"))
        if x is not None and y is not None and (math.isnan(y) or x - y > tol.cosine_drop):
            out.append(Moved("drift", f"cosine[{name}]", x, y, True, f"'{name}' cosine {x:.6f} → {y:.6f}"))
    x, y = number(a.get("top1_agreement")), number(b.get("top1_agreement"))
    if x is not None and y is not None and abs(y - x) > max(tol.top1_drop, 1e-12):
        out.append(Moved("drift", "top1_agreement", x, y, x - y > tol.top1_drop,
                         f"top1 agreement {x:.4f} → {y:.4f} ({y - x:+.4f})"))
    return out


def worst(t, only: str | None = None) -> tuple[float | None, float | None]:
    """A target's worst max_abs and cosine over its outputs (None, None without outputs), as its report has
    them. ``t``: a ``TargetResult`` or its metrics (a dict). ``only``: ``"numbers"`` counts numbers alone (a
    JSON report's "inf" left out), ``"finite"`` finite numbers alone (None where none is left)."""
    outs = list(((t if isinstance(t, dict) else t.metrics or {}).get("outputs") or {}).values())
    if only is None:
        return (max(o["max_abs"] for o in outs), min(o["cosine"] for o in outs)) if outs else (None, None)
    keep = lambda v: isinstance(v, (int, float)) and (only == "numbers" or math.isfinite(v))  # noqa: E731
    a, c = ([o.get(k) for o in outs if keep(o.get(k))] for k in ("max_abs", "cosine"))
    return (max(a) if a else None), (min(c) if c else None)


def agreement(t) -> float | None:
    """A target's top-1 agreement with the reference (None where no output reads as class scores); ``t``: a
    ``TargetResult`` or its metrics."""
    return (t if isinstance(t, dict) else t.metrics or {}).get("top1_agreement")


COLUMNS = (
    Column("max |Δ|", lambda t, medium: fmt(worst(t)[0], ".2e" if medium == "html" else ".1e", medium),
           headers={"markdown": "max \\|Δ\\|"}),
    Column("cosine", lambda t, medium: fmt(worst(t)[1], ".6f", medium)),
    Column("top-1", lambda t, medium: fmt(agreement(t), ".4f", medium)),
)


def _per_output(report, page) -> str:
    rows = []
    num = page.num
    for t in report.targets:
        thr = t.thresholds or {}
        for name, o in ((t.metrics or {}).get("outputs") or {}).items():
            limit = bound(thr, o)
            over = isinstance(o.get("max_abs"), (int, float)) and limit is not None and o["max_abs"] > limit
            ma = num(o.get("max_abs"), ".2e")
            rows.append([page.e(t.id), f"<code>{page.e(name)}</code>", f'<span class="bad">{ma}</span>' if over else ma,
                         num(limit, ".0e" if limit == thr.get("max_abs") else ".2e"), num(o.get("max_abs_steps"), ".2f"), num(o.get("max_rel"), ".2e"),
                         num(o.get("mean_abs"), ".2e"), num(o.get("rmse"), ".2e"), num(o.get("p99_abs"), ".2e"),
                         num(o.get("snr_db"), ".1f"), num(o.get("cosine"), ".7f"), num(o.get("top1_agreement"), ".4f")])
    if not rows:
        return "<p>No target produced outputs to compare.</p>"
    return page.table(["target", "output", "max_abs", "threshold", "steps", "max_rel", "mean_abs", "rmse", "p99_abs",
                       "SNR dB", "cosine", "top-1"], rows, numeric_from=2)


SECTIONS = (Section("Drift per output", _per_output),)


def output_drift(ref: np.ndarray, got: np.ndarray, scale: float | None = None) -> dict:
    """max_abs, max_rel, mean_abs, rmse, p99_abs, snr_db, cosine (and max_abs in quantization steps when a
    quantization ``scale`` is known). Non-finite values are counted, never silently dropped.

    ``nonfinite``: NaN/Inf values where the reference has the same (no evidence: a breach, never a pass);
    ``nonfinite_mismatch``: where only one side has them.
    ``snr_db``: the reference's energy over the difference's, in dB (the SQNR quantization tools report):
    ``inf`` for identical outputs, about 20 dB per decimal digit of agreement.
    ``ref_max_abs``: the reference's largest finite magnitude, the scale of the max_abs bound
    (``bounds.bound``: rounding grows with the values rounded)."""
    r = np.asarray(ref, dtype=np.float64).reshape(-1)
    g = np.asarray(got, dtype=np.float64).reshape(-1)
    out: dict = {}
    bad_r, bad_g = ~np.isfinite(r), ~np.isfinite(g)
    mismatched_nonfinite = int(np.sum(bad_r != bad_g) + np.sum(bad_r & bad_g & (np.nan_to_num(r) != np.nan_to_num(g))))
    ok = ~(bad_r | bad_g)
    d = np.abs(r[ok] - g[ok])
    if d.size:
        out["max_abs"] = float(d.max())
        out["max_rel"] = float(np.max(d / np.maximum(np.abs(r[ok]), 1e-12)))
        out["mean_abs"] = float(d.mean())
        out["rmse"] = float(np.sqrt(np.mean(d * d)))
        out["p99_abs"] = float(np.percentile(d, 99))
    else:
        out.update(max_abs=0.0, max_rel=0.0, mean_abs=0.0, rmse=0.0, p99_abs=0.0)
    out["snr_db"] = snr_db(r[ok], d)
    finite_r = np.abs(r[~bad_r])
    out["ref_max_abs"] = float(finite_r.max()) if finite_r.size else 0.0
    nr, ng = np.linalg.norm(r[ok]), np.linalg.norm(g[ok])
    if nr == 0 and ng == 0:
        out["cosine"] = 1.0
    elif nr == 0 or ng == 0:
        out["cosine"] = 0.0
    else:
        out["cosine"] = float(np.clip(np.dot(r[ok], g[ok]) / (nr * ng), -1.0, 1.0))
    both = int(np.sum(bad_r & bad_g))
    if both and not mismatched_nonfinite:
        out["nonfinite"] = both  # NaN/Inf where the reference has them too: agreement there proves nothing
    if mismatched_nonfinite:
        out["nonfinite_mismatch"] = mismatched_nonfinite
        out["max_abs"] = float("inf")
        out["cosine"] = 0.0
    if scale:
        out["max_abs_steps"] = float(out["max_abs"] / scale) if np.isfinite(out["max_abs"]) else float("inf")
        out["quant_scale"] = float(scale)
    return out


def snr_db(ref: np.ndarray, diff: np.ndarray) -> float:
    """10·log10(Σ ref² / Σ diff²): inf where the outputs agree exactly, -inf for a silent reference."""
    noise = float(np.sum(diff * diff))
    if noise == 0.0:
        return float("inf")
    signal = float(np.sum(ref * ref))
    return round(10.0 * float(np.log10(signal / noise)), 3) if signal > 0 else float("-inf")


#: an output named so, ``[batch, sequence, classes]`` (a decoder's ``logits`` over its vocabulary, a CTC head's
#: over its frames), holds scores over its last axis: its top-1 is taken at every position. Not at a higher
#: rank: a segmentation head's ``logits [batch, classes, height, width]`` has its classes elsewhere.
SCORE_NAMES = re.compile(r"logit|score|prob", re.IGNORECASE)


def looks_like_scores(arr: np.ndarray, name: str = "") -> bool:
    """[batches, (batch,) classes] floats (as stacked by the worker), more than one class; or [batches, batch,
    positions, classes] for an output whose name says it holds scores (SCORE_NAMES)."""
    return (isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and arr.ndim >= 2 and arr.shape[-1] > 1
            and (arr.ndim in (2, 3) or arr.ndim == 4 and bool(SCORE_NAMES.search(name))))


def top1(arr: np.ndarray) -> np.ndarray:
    return np.argmax(arr, axis=-1).reshape(-1)


def top1_agreement(ref: np.ndarray, got: np.ndarray, name: str = "") -> float | None:
    """The share of positions (every row, and every sequence position of a named score output) whose argmax
    over the last axis agrees."""
    if not looks_like_scores(ref, name) or ref.shape != got.shape:
        return None
    return float(np.mean(top1(ref) == top1(got)))


def compare(ref: dict[str, np.ndarray], got: dict[str, np.ndarray], quant: dict | None = None,
            names: list[str] | None = None) -> tuple[dict, float | None, list[str]]:
    """Per-output drift, the lowest top-1 agreement over score-like outputs, and structural problems
    (missing outputs, shape changes) as messages — each one makes the target ``drift``. ``names``: every
    output that must be compared (default: the reference's)."""
    quant = quant or {}
    per: dict[str, dict] = {}
    problems: list[str] = []
    agreements: list[float] = []
    for name in names or list(ref):
        if name not in ref:
            problems.append(f"output '{name}' cannot be compared: the reference gave no consistent value for it "
                            "(its shape varies between inputs?)")
            continue
        r = ref[name]
        if name not in got:
            problems.append(f"output '{name}' is missing")
            continue
        g = got[name]
        if isinstance(r, list) or isinstance(g, list):  # shapes vary between batches: compare batch by batch
            rl, gl = (x if isinstance(x, list) else list(x) for x in (r, g))
            bad = next((i for i, (a, b) in enumerate(zip(rl, gl)) if a.shape != b.shape), None)
            if len(rl) != len(gl) or bad is not None:
                i = bad or 0
                problems.append(f"output '{name}' has shape {list(gl[i].shape)} for input batch {i}, reference {list(rl[i].shape)}")
                continue
            flat = lambda xs: np.concatenate([x.reshape(-1) for x in xs]) if xs else np.zeros(0)  # noqa: E731
            per[name] = output_drift(flat(rl), flat(gl), (quant.get(name) or {}).get("scale"))
            continue
        if r.shape != g.shape:
            if r.size != g.size:
                problems.append(f"output '{name}' has shape {list(g.shape[1:])}, reference {list(r.shape[1:])}")
                continue
            problems.append(f"output '{name}' has shape {list(g.shape[1:])}, reference {list(r.shape[1:])} (values compared in order)")
        scale = (quant.get(name) or {}).get("scale")
        per[name] = output_drift(r, g.reshape(r.shape), scale)
        a = top1_agreement(r, g.reshape(r.shape), name)
        if a is not None:
            per[name]["top1_agreement"] = a
            agreements.append(a)
    if not per and not problems:
        problems.append("no output could be compared")
    return per, (min(agreements) if agreements else None), problems


def drift_plot(report, kit) -> str | None:
    """Worst absolute difference from the reference per target and output, on a log axis, with each
    target's max_abs threshold marked."""
    rows = []
    for t in report.targets:
        for name, o in ((t.metrics or {}).get("outputs") or {}).items():
            v = o.get("max_abs")
            v = math.inf if v in ("inf", "nan") else kit.finite(v)
            if v is not None:
                rows.append((f"{t.id} · {name}" if len((t.metrics or {}).get("outputs")) > 1 else t.id, v, t))
    if not rows:
        return None
    fig, ax = kit.figure(len(rows))
    top = max([v for _, v, _ in rows if math.isfinite(v)] + [1.0]) * 10
    ys = range(len(rows))
    vals = [top if not math.isfinite(v) else max(v, kit.ZERO_FLOOR) for _, v, _ in rows]
    ax.barh(ys, vals, color=[kit.color(t) for _, _, t in rows], height=0.6)
    for y, (_, v, t) in zip(ys, rows):
        thr = kit.finite((t.thresholds or {}).get("max_abs"))
        if thr:
            ax.plot([thr, thr], [y - 0.4, y + 0.4], color="black", linewidth=1.5)
        if v == 0 or not math.isfinite(v):
            ax.text(kit.ZERO_FLOOR * 2 if v == 0 else top, y, " identical" if v == 0 else " NaN/Inf", va="center",
                    ha="left" if v == 0 else "right", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(kit.ZERO_FLOOR, top)
    ax.set_yticks(list(ys), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("max |output − reference| (log scale; black tick: threshold)")
    ax.grid(axis="x", alpha=0.3)
    return kit.svg(fig, "drift per target")


PLOTS = (Plot("Drift per target", drift_plot, order=10),)
