"""What changed between two reports of a model, and which changes are regressions.

One module for both ``portability diff A B`` (every change beyond noise) and ``check --baseline``
(exit 1 when a gating target regressed). Per target, in order: its status, then what each metric says
moved (``metrics.*.regressions``: output drift, top-1 agreement, accuracy, artifact size, latency).
Metrics are compared only where both runs produced them (a target that ran in both). Changes are ordered
by kind: this module's own kinds, then the kinds each metric declares (``REGRESSION_KINDS``), in the
metrics' registry order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from portability.core.status import ERRORS, RANK, Status
from portability.report.schema import Report, TargetResult

#: how far from working a status is; a higher rank after than before is a regression (``skipped`` has
#: no rank: a target that did not run says nothing about the model)
STATUS_RANK = RANK
#: the kinds of change this module makes itself, before every kind the metrics declare
OWN_KINDS = ("status", "presence", "outputs")


def kind_order() -> tuple[str, ...]:
    """The order changes are listed in: ``OWN_KINDS``, then each metric's ``REGRESSION_KINDS`` in registry order."""
    from portability.metrics import regression_kinds

    return OWN_KINDS + tuple(k for k in regression_kinds() if k not in OWN_KINDS)


def _tolerances() -> type:
    from dataclasses import make_dataclass

    from portability.metrics import tolerances

    return make_dataclass("Tolerances", [(k, type(v) if v is not None else float | None, field(default=v))
                                         for k, v in tolerances().items()], frozen=True)


#: What counts as noise (``[tool.portability.regression]``): each metric's ``TOLERANCES`` (drift: drift_abs,
#: drift_ratio, cosine_drop, top1_drop; accuracy: accuracy_drop; size: size_growth; latency: latency_growth,
#: gate_latency)
Tolerances = _tolerances()


@dataclass(frozen=True)
class Change:
    target: str
    kind: str  # one of kind_order()
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


def _ran(t: TargetResult) -> bool:
    return t.status not in ERRORS and t.status != Status.SKIPPED


def _status(a: TargetResult, b: TargetResult) -> list[Change]:
    if a.status == b.status:
        return []
    ra, rb = STATUS_RANK.get(a.status), STATUS_RANK.get(b.status)
    worse = ra is not None and rb is not None and rb > ra
    why = f": {'; '.join(([b.error] if b.error else []) + list(b.breaches))}" if b.failed else ""
    return [Change(b.id, "status", "status", a.status, b.status, worse, b.gating,
                   f"status {a.status} → {b.status}{why}")]


def compare_targets(a: TargetResult, b: TargetResult, tol: Tolerances) -> list[Change]:
    from portability.metrics import regressions

    return _status(a, b) + [Change(b.id, m.kind, m.metric, m.before, m.after, m.worse, b.gating, m.text)
                            for m in regressions(a, b, tol, ran=_ran(a) and _ran(b))]


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
        return [], [f"{who} holds no outputs (a report written without output_digests, a run recorded without "
                    "outputs): outputs not compared"]
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
    rank = {k: i for i, k in enumerate(kind_order())}
    # stable: target order kept within a kind; a kind no metric declares comes last
    changes.sort(key=lambda c: rank.get(c.kind, len(rank)))
    return Diff(labels[0], labels[1], tuple(changes), tuple(_notes(before, after) + out_notes))
