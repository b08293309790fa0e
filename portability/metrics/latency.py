"""Latency summary from the per-run milliseconds a worker measured around the runtime call, the ratio to
the reference's p50, the timing plan (runs within a time budget), and when chunked timing may stop (the
median is stable)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from portability.metrics.base import Column, Moved, Plot, Section, fmt, number

FIELDS = {"latency_ms": None}
THRESHOLDS: dict = {}  # latency is reported, never judged: it is noisy
#: what --baseline calls noise: p50 growth as a fraction of the baseline's (0.5: 1.5x slower), and whether
#: a slower p50 is a regression at all (only on request: ``--baseline-latency``)
TOLERANCES = {"latency_growth": 0.5, "gate_latency": False}
#: the kinds of change its ``regressions`` report
REGRESSION_KINDS = ("latency",)
#: why a target is not timed (``Runtime.untimed``, the report's ``latency_skipped``): whose speed it would be,
#: and the table's mark
UNTIMED = {"emulated": ("an emulator", "emu"), "software adapter": ("a software GPU adapter", "sw"),
           "reference implementation": ("the ONNX spec's Python evaluator", "ref")}


def compute(ev) -> tuple[dict, list[str]]:
    skipped = (ev.worker.latency or {}).get("skipped")
    if skipped:  # its speed is no device's (``--time-emulated`` times it): missing, not slow
        return {"latency_ms": None, "latency_skipped": skipped}, []
    lat = summarize(ev.worker.latency)
    out: dict = {"latency_ms": lat}
    if lat and ev.worker.emulated:
        lat["emulated"] = True  # an emulator's speed, not a device's
    ref = (ev.reference_metrics.get("latency_ms") or {}).get("p50")
    if not ev.is_reference and ref and lat and lat.get("p50"):
        out["p50_vs_reference"] = round(lat["p50"] / ref, 3)
    return out, []


def breaches(metrics: dict, t: dict) -> list[str]:
    return []


def regressions(before, after, tol) -> list[Moved]:
    x, y = (number(((t.metrics or {}).get("latency_ms") or {}).get("p50")) for t in (before, after))
    if not x or not y or (y <= x * (1 + tol.latency_growth) and x <= y * (1 + tol.latency_growth)):
        return []
    return [Moved("latency", "p50_ms", x, y, tol.gate_latency and y > x, f"p50 latency {x:.4g} → {y:.4g} ms ({y / x:.2f}x)")]


def mark(untimed: str | None) -> str:
    """The table's mark of a target not timed for this reason ("" for none)."""
    return UNTIMED.get(untimed or "", ("", ""))[1]


def _p50(t, medium: str) -> str:
    if (t.metrics or {}).get("latency_skipped") and medium == "terminal":
        return "– " + mark(t.metrics["latency_skipped"])
    lat = (t.metrics or {}).get("latency_ms") or {}
    return fmt(lat.get("p50"), ".3f", medium) + ((" emu" if medium == "terminal" else " (emulated)") if lat.get("emulated") else "")


COLUMNS = (
    Column("p50 ms", _p50, media=("terminal", "markdown")),
    Column("× ref", lambda t, medium: fmt((t.metrics or {}).get("p50_vs_reference"), ".2f", medium), media=("terminal", "markdown")),
)


def _section(report, page) -> str:
    rows = []
    num = page.num
    for t in report.targets:
        lat = (t.metrics or {}).get("latency_ms") or {}
        if not lat:
            continue
        ident = f'<span class="ref">{page.e(t.id)} (reference)</span>' if t.id == report.reference else page.e(t.id)
        emu = " (emulated)" if lat.get("emulated") else ""
        ratio = (t.metrics or {}).get("p50_vs_reference")
        rows.append([ident + emu, num(lat.get("load"), ".1f"), num(lat.get("first"), ".3f"), num(lat.get("p50"), ".3f"),
                     num(lat.get("p90"), ".3f"), num(lat.get("p99"), ".3f"), num(lat.get("runs"), "d"),
                     "1 (reference)" if t.id == report.reference else (f"{ratio:.2f}×" if ratio else "–")])
    if not rows:
        return "<p>No target was timed (--runs 0, or none ran).</p>"
    return page.table(["target", "load ms", "first ms", "p50 ms", "p90 ms", "p99 ms", "runs", "p50 vs reference"], rows)


SECTIONS = (Section("Latency", _section),)


#: the timing budget of a target whose latency is not a device's: a software GPU adapter, an emulator
#: (such latencies compare targets under the same emulation at best; a few runs show it)
SLOW_BUDGET_S = 0.5

#: the fewest timed runs of a target whose inference is slow (a target may set its own, even 0)
MIN_RUNS = 5
#: ...where MIN_RUNS would overrun the time budget: a median and its spread (the budget follows the model's
#: pace; a seconds-long inference varies little from run to run, and the report gives the runs taken)
MIN_SLOW_RUNS = 3
#: the fewest timed runs of a target whose speed is no device's (an emulator, a software GPU adapter):
#: none where one inference overruns its budget — the first inference's time, labelled, says what there is to
#: say, and the machine is not held quiet for a minute to time an emulator
SLOW_MIN_RUNS = 0
#: the seconds the correctness batches of such a target may take: when one inference is slow, fewer
#: batches are compared (at least one; the report says how many)
SLOW_SAMPLE_BUDGET_S = 20.0


def sample_count(first_ms: float, batches: int, budget_s: float | None) -> int:
    """How many of ``batches`` input batches fit ``budget_s`` when one takes ``first_ms`` (all of them
    without a budget; at least one)."""
    if not budget_s or first_ms <= 0 or first_ms * batches <= budget_s * 1e3:
        return batches
    return max(1, min(batches, int(budget_s * 1e3 // first_ms)))


@dataclass(frozen=True)
class TimingPlan:
    warmup: int
    runs: int
    #: the runs asked for, when the time budget cut them (else None)
    asked: int | None = None
    budget_s: float | None = None
    per_run_ms: float | None = None

    def record(self) -> dict:
        """What the report says about a cut: the budget, the runs asked for, one inference's cost."""
        if self.asked is None:
            return {}
        return {"budget_s": self.budget_s, "runs_asked": self.asked, "per_run_estimate_ms": round(self.per_run_ms or 0.0, 3)}


def timing_plan(per_run_ms: float, warmup: int, runs: int, budget_s: float | None, min_runs: int = MIN_RUNS) -> TimingPlan:
    """Warm-up and timed runs that fit ``budget_s`` given what one inference costs (like timeit's
    autorange): a fifth of what fits goes to warm-up, the rest to timed runs, never more than asked nor
    fewer than ``min_runs`` (0: a target too slow for its budget is not timed) — unless ``min_runs`` runs
    would overrun the budget: then MIN_SLOW_RUNS at least, and where those take over twice the budget, as many
    as fit twice the budget, at least one."""
    if not budget_s or runs <= 0 or per_run_ms <= 0 or per_run_ms * (warmup + runs) <= budget_s * 1e3:
        return TimingPlan(warmup, runs)
    fit = int(budget_s * 1e3 // per_run_ms)
    w = min(warmup, fit // 5)
    floor = min(min_runs, runs)
    if floor and per_run_ms * floor > budget_s * 1e3:
        floor = min(floor, max(MIN_SLOW_RUNS, fit))
    if floor and per_run_ms * floor > 2 * budget_s * 1e3:
        floor = max(1, int(2 * budget_s * 1e3 // per_run_ms))
    r = max(floor, min(runs, fit - w))
    return TimingPlan(w, r, asked=runs, budget_s=budget_s, per_run_ms=per_run_ms)


#: the runs of the first timing chunk (or a target's ``min_runs``, if more); each later chunk doubles the
#: runs taken, until the median is stable, the runs are all taken, or the time budget is spent
FIRST_CHUNK = 10
#: the median is stable when the half-width of its ~95% confidence interval is at most this fraction of it
STABLE_HALF_WIDTH = 0.05
#: the fewest runs whose median may be called stable
MIN_STABLE_RUNS = 5


def median_half_width(samples) -> float:
    """The half-width of a distribution-free ~95% confidence interval of the median, as a fraction of the
    median: the order statistics of ranks n/2 - 1.96·√n/2 and 1 + n/2 + 1.96·√n/2 (1-based, rounded,
    clipped to the samples) bound it. ``inf`` without samples or with a median of 0 or less."""
    s = np.sort(np.asarray(samples, dtype=np.float64))
    n = s.size
    med = float(np.median(s)) if n else 0.0
    if med <= 0:
        return float("inf")
    spread = 1.96 * np.sqrt(n) / 2
    lo = min(max(int(round(n / 2 - spread)), 1), n)
    hi = min(max(int(round(1 + n / 2 + spread)), 1), n)
    return float((s[hi - 1] - s[lo - 1]) / 2 / med)


def median_stable(samples, tol: float = STABLE_HALF_WIDTH) -> bool:
    """Whether ``samples`` (at least MIN_STABLE_RUNS) pin their median within ``tol`` of it (~95% confidence)."""
    return len(samples) >= MIN_STABLE_RUNS and median_half_width(samples) <= tol


def first_chunk(max_runs: int, min_runs: int) -> int:
    """The runs of the first timing chunk: FIRST_CHUNK, or ``min_runs`` if more, never over ``max_runs``."""
    return max(0, min(max_runs, max(FIRST_CHUNK, min_runs)))


def next_chunk(samples, taken: int, max_runs: int, budget_s: float | None, elapsed_ms: float,
               budget_cut: bool = False) -> tuple[int, str | None]:
    """After ``taken`` timed runs (their ``samples``) in ``elapsed_ms``: the runs of the next chunk, or 0
    and why the timing stops — ``"runs"`` (all ``max_runs`` taken; ``"budget"`` where ``budget_cut``: the
    budget set ``max_runs``), ``"stable"`` (:func:`median_stable`), ``"budget"`` (at the samples' mean pace
    no further run fits ``budget_s``). A next chunk doubles the runs taken, within both bounds."""
    if taken >= max_runs:
        return 0, "budget" if budget_cut else "runs"
    if median_stable(samples):
        return 0, "stable"
    n = min(max(taken, 1), max_runs - taken)
    if budget_s and len(samples):
        pace = float(np.mean(samples))
        fit = int((budget_s * 1e3 - elapsed_ms) // pace) if pace > 0 else n
        if fit < 1:
            return 0, "budget"
        n = min(n, fit)
    return n, None


def summarize(raw: dict | None) -> dict | None:
    """``{"load", "first", "samples": [...], ...extras}`` -> load, first, p50, p90, p99, runs (+ extras)."""
    if not raw:
        return None
    out = {k: v for k, v in raw.items() if k != "samples"}
    s = np.asarray(raw.get("samples") or [], dtype=np.float64)
    if s.size:
        out.update(p50=float(np.percentile(s, 50)), p90=float(np.percentile(s, 90)),
                   p99=float(np.percentile(s, 99)), min=float(s.min()), runs=int(s.size))
    else:
        out["runs"] = 0
    out = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}
    if s.size:
        out["samples"] = kept_samples(s)
    return out


#: the most per-run timings a report keeps (the distribution plots need them; percentiles use them all)
MAX_SAMPLES = 1000


def kept_samples(s: np.ndarray) -> list[float]:
    """Every timed run in order, or, beyond MAX_SAMPLES, that many evenly spaced quantiles (sorted)."""
    if s.size > MAX_SAMPLES:
        s = np.quantile(s, np.linspace(0.0, 1.0, MAX_SAMPLES))
    return [round(float(x), 4) for x in s]


def latency_plot(report, kit) -> str | None:
    """Box plot of every timed run per target (log axis), the reference in blue; emulated timings are
    labelled as such."""
    rows = []
    for t in report.targets:
        lat = (t.metrics or {}).get("latency_ms") or {}
        s = [x for x in (lat.get("samples") or []) if kit.finite(x) is not None and x > 0]
        if s:
            label = t.id + (" (emulated)" if lat.get("emulated") else "") + (" — reference" if t.id == report.reference else "")
            rows.append((label, s, t))
    if not rows:
        return None
    fig, ax = kit.figure(len(rows))
    parts = ax.boxplot([s for _, s, _ in rows], orientation="horizontal", widths=0.6, patch_artist=True,
                       showfliers=True, flierprops={"markersize": 2, "alpha": 0.5})
    for box, (_, _, t) in zip(parts["boxes"], rows):
        box.set_facecolor(kit.REFERENCE_COLOR if t.id == report.reference else "#90a4ae")
        box.set_alpha(0.8)
    ax.set_yticks(range(1, len(rows) + 1), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds per inference, every timed run (log scale; blue: the reference)")
    ax.grid(axis="x", alpha=0.3)
    return kit.svg(fig, "latency distribution per target")


PLOTS = (Plot("Latency per target", latency_plot, order=20),)


def samples_note(details: dict | None) -> tuple[str, ...]:
    """What a target whose correctness batches were cut to its budget says (``details.samples``)."""
    cut = (details or {}).get("samples")
    if not cut:
        return ()
    pace = cut.get("pace_ms", cut["first_ms"])
    first = f" (the first {cut['first_ms'] / 1e3:.3g} s)" if abs(pace - cut["first_ms"]) > 0.05 * cut["first_ms"] else ""
    return (f"compared on {cut['batches']} of {cut['of']} input batches: one inference took "
            f"{pace / 1e3:.3g} s here{first}, over the {cut['budget_s']:g} s its correctness batches may take",)


def timing_note(m: dict) -> tuple[str, ...]:
    """What a target timed within its budget with fewer runs than asked says (nothing where its median was
    stable before the budget mattered), or one not timed at all because its speed is no device's."""
    if m.get("latency_skipped"):
        whose = UNTIMED.get(m["latency_skipped"], (m["latency_skipped"], ""))[0]
        return (f"not timed: its speed is {whose}'s, no device's (--time-emulated times it)",)
    lat = m.get("latency_ms") or {}
    if not lat.get("runs_asked") or lat.get("stopped") == "stable":
        return ()
    if not lat.get("runs"):
        return (f"not timed: one inference takes about {lat['per_run_estimate_ms'] / 1e3:.3g} s here, over the "
                f"{lat['budget_s']:g} s timing budget; the first inference's time is reported",)
    return (f"latency from {lat.get('runs', 0)} of {lat['runs_asked']} runs: one inference takes about "
            f"{lat['per_run_estimate_ms']:.4g} ms, over the {lat['budget_s']:g} s timing budget",)
