"""What changed between two reports of a model, and which changes are regressions.

One module for both ``portability diff A B`` (every change beyond noise) and ``check --baseline``
(exit 1 when a gating target regressed). Per target, in order: its status, then output drift, top-1
agreement and accuracy, then artifact size, then latency. Metrics are compared only where both runs
produced them (a target that ran in both).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from portability.report.schema import FAILING, Report, TargetResult

#: how far from working a status is; a higher rank after than before is a regression (``skipped`` has
#: no rank: a target that did not run says nothing about the model)
STATUS_RANK = {"pass": 0, "fallback": 1, "drift": 2, "run-error": 3, "load-error": 4, "convert-error": 5,
               "timeout": 6, "crashed": 6}
KIND_ORDER = ("status", "presence", "outputs", "drift", "accuracy", "size", "latency")


@dataclass(frozen=True)
class Tolerances:
    """What counts as noise. A drift regression must pass both bounds: grow by more than ``drift_abs``
    (default: a tenth of the target's max_abs threshold, at least 1e-6) and to more than ``drift_ratio``
    times the baseline's worst absolute difference."""

    drift_abs: float | None = None
    drift_ratio: float = 2.0
    cosine_drop: float = 1e-6
    top1_drop: float = 0.0
    accuracy_drop: float = 0.005
    #: growth of an artifact's size, as a fraction of the baseline's (0.10: 10 %)
    size_growth: float = 0.10
    #: growth of p50 latency as a fraction of the baseline's (0.5: 1.5x slower); gated only on request
    latency_growth: float = 0.5
    gate_latency: bool = False


@dataclass(frozen=True)
class Change:
    target: str
    kind: str  # one of KIND_ORDER
    metric: str
    before: object
    after: object
    #: worse beyond tolerance
    regression: bool
    gating: bool
    text: str


@dataclass(frozen=True)
class Diff:
    before: str  # what the baseline is (run id or file), for messages
    after: str
    changes: tuple[Change, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def regressions(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.regression)

    @property
    def gating_regressions(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.regression and c.gating)

    def targets_changed(self) -> list[str]:
        return list(dict.fromkeys(c.target for c in self.changes))


def signature(model: dict) -> tuple:
    """A model's input and output names and dtypes (from a report's ``model``): two reports are
    comparable when these match."""
    return tuple(tuple((x["name"], x.get("dtype")) for x in model.get(key) or ()) for key in ("inputs", "outputs"))


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def _num(v) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if v in ("inf", "-inf", "nan"):
        return float(v)
    return None


def _ran(t: TargetResult) -> bool:
    return t.status not in FAILING - {"drift", "fallback"} and t.status != "skipped"


def _status(a: TargetResult, b: TargetResult) -> list[Change]:
    if a.status == b.status:
        return []
    ra, rb = STATUS_RANK.get(a.status), STATUS_RANK.get(b.status)
    worse = ra is not None and rb is not None and rb > ra
    why = f": {'; '.join(([b.error] if b.error else []) + list(b.breaches))}" if b.failed else ""
    return [Change(b.id, "status", "status", a.status, b.status, worse, b.gating,
                   f"status {a.status} → {b.status}{why}")]


def _drift_floor(t: TargetResult, tol: Tolerances) -> float:
    if tol.drift_abs is not None:
        return tol.drift_abs
    thr = _num((t.thresholds or {}).get("max_abs"))
    return max(1e-6, 0.1 * thr) if thr else 1e-6


def _drift(a: TargetResult, b: TargetResult, tol: Tolerances) -> list[Change]:
    out = []
    floor = _drift_floor(b, tol)
    oa, ob = (a.metrics or {}).get("outputs") or {}, (b.metrics or {}).get("outputs") or {}
    for name in oa.keys() & ob.keys():
        x, y = _num(oa[name].get("max_abs")), _num(ob[name].get("max_abs"))
        if x is not None and y is not None and (math.isnan(y) or (y - x > floor and y > x * tol.drift_ratio)):
            out.append(Change(b.id, "drift", f"max_abs[{name}]", x, y, True, b.gating,
                              f"'{name}' max_abs {_fmt(x)} → {_fmt(y)}"))
        elif x is not None and y is not None and x - y > floor and x > y * tol.drift_ratio:
            out.append(Change(b.id, "drift", f"max_abs[{name}]", x, y, False, b.gating,
                              f"'{name}' max_abs {_fmt(x)} → {_fmt(y)} (better)"))
        x, y = _num(oa[name].get("cosine")), _num(ob[name].get("cosine"))
        if x is not None and y is not None and (math.isnan(y) or x - y > tol.cosine_drop):
            out.append(Change(b.id, "drift", f"cosine[{name}]", x, y, True, b.gating,
                              f"'{name}' cosine {x:.6f} → {y:.6f}"))
    return out


def _accuracy(a: TargetResult, b: TargetResult, tol: Tolerances) -> list[Change]:
    out = []
    ma, mb = a.metrics or {}, b.metrics or {}
    for key, bound in (("top1_agreement", tol.top1_drop), ("accuracy", tol.accuracy_drop)):
        x, y = _num(ma.get(key)), _num(mb.get(key))
        if x is None or y is None or abs(y - x) <= max(bound, 1e-12):
            continue
        worse = x - y > bound
        out.append(Change(b.id, "drift" if key == "top1_agreement" else "accuracy", key, x, y, worse, b.gating,
                          f"{key.replace('_', ' ')} {x:.4f} → {y:.4f} ({y - x:+.4f})"))
    return out


def _size(a: TargetResult, b: TargetResult, tol: Tolerances) -> list[Change]:
    x, y = ((t.artifact or {}).get("size_bytes") for t in (a, b))
    if not x or not y or abs(y - x) <= tol.size_growth * x:
        return []
    fmt = (b.artifact or {}).get("format", "artifact")
    return [Change(b.id, "size", "size_bytes", x, y, y > x, b.gating,
                   f"{fmt} size {x:,} → {y:,} bytes ({(y - x) / x:+.0%})")]


def _latency(a: TargetResult, b: TargetResult, tol: Tolerances) -> list[Change]:
    x, y = (_num(((t.metrics or {}).get("latency_ms") or {}).get("p50")) for t in (a, b))
    if not x or not y or (y <= x * (1 + tol.latency_growth) and x <= y * (1 + tol.latency_growth)):
        return []
    return [Change(b.id, "latency", "p50_ms", x, y, tol.gate_latency and y > x, b.gating,
                   f"p50 latency {x:.4g} → {y:.4g} ms ({y / x:.2f}x)")]


def compare_targets(a: TargetResult, b: TargetResult, tol: Tolerances) -> list[Change]:
    changes = _status(a, b)
    if _ran(a) and _ran(b):
        changes += _drift(a, b, tol) + _accuracy(a, b, tol) + _latency(a, b, tol)
    changes += _size(a, b, tol)
    return changes


def _notes(before: Report, after: Report) -> list[str]:
    notes = []
    if before.model.get("sha256") != after.model.get("sha256"):
        notes.append(f"different model files: {str(before.model.get('sha256'))[:12]} → {str(after.model.get('sha256'))[:12]}")
    if signature(before.model) != signature(after.model):
        notes.append("the models' inputs/outputs differ: per-output metrics are compared by name only")
    ia, ib = ({k: r.inputs.get(k) for k in ("source", "samples", "seed", "path")} for r in (before, after))
    if ia != ib:
        notes.append(f"the inputs differ ({ia} → {ib}): drift and accuracy are not like for like")
    pa, pb = (r.environment.get("packages") or {} for r in (before, after))
    moved = [f"{k} {pa.get(k, '–')} → {pb.get(k, '–')}" for k in sorted(pa.keys() | pb.keys()) if pa.get(k) != pb.get(k)]
    if moved:
        notes.append("packages changed: " + ", ".join(moved))
    return notes


def _outputs(before: Report, after: Report, kept: tuple | None, labels: tuple[str, str]) -> tuple[list[Change], list[str]]:
    """Every target's outputs against the baseline's own outputs on the same inputs (``golden``), with the
    target's thresholds: a change that moves every output together is seen here, not in drift."""
    if kept is None:
        return [], []
    ga, gb = kept
    if ga is None or gb is None:
        who = labels[0] if ga is None else labels[1]
        return [], [f"{who} holds no outputs (a JSON report never does; a history run id or a --save-outputs file "
                    "does): outputs not compared"]
    from portability.report.golden import compare

    found, why = compare(ga, gb, {t.id: t.thresholds or {} for t in after.targets})
    gating = {t.id: t.gating for t in after.targets}
    return ([Change(c.target, "outputs", f"outputs[{c.output}].{c.metric}", c.before, c.after, True,
                    gating.get(c.target, False), c.text) for c in found], [why] if why else [])


def diff(before: Report, after: Report, tol: Tolerances | None = None, labels: tuple[str, str] = ("A", "B"),
         outputs: tuple | None = None) -> Diff:
    """Every change from ``before`` to ``after`` beyond noise: status changes first, then changed outputs
    (``outputs``: both runs' kept outputs, ``golden.Golden`` or None), drift, accuracy, size and latency,
    each target in the order of ``after``."""
    tol = tol or Tolerances()
    changes, out_notes = _outputs(before, after, outputs, labels)
    for b in after.targets:
        a = before.target(b.id)
        if a is None:
            changes.append(Change(b.id, "presence", "target", None, b.status, False, b.gating,
                                  f"new target ({b.status})"))
        else:
            changes += compare_targets(a, b, tol)
    for a in before.targets:
        if after.target(a.id) is None:
            changes.append(Change(a.id, "presence", "target", a.status, None, False, a.gating,
                                  f"not in {labels[1]} (was {a.status})"))
    changes.sort(key=lambda c: KIND_ORDER.index(c.kind))  # stable: target order kept within a kind
    return Diff(labels[0], labels[1], tuple(changes), tuple(_notes(before, after) + out_notes))
