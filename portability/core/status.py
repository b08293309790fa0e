"""A target's status: the one vocabulary of the report (DESIGN.md), owned here and used everywhere.

A :class:`Status` is a ``str`` (``Status.PASS == "pass"``), so reports, JSON and the history keep their plain
strings. The worker decides its own outcome (:data:`WORKER`: ``ok`` or the failure it ended in), the runner
the outcome of a worker that died or overran, and the verdict (``engine/verdict.py``) the final status of
a target that ran: ``pass``, ``drift`` or ``fallback``. The sets and the order below (:data:`FAILING`,
:data:`ERRORS`, :data:`RANK`...) are the groups and the order every module shares; an audit's model has the status
of its worst failing gating target (:func:`worst`).
"""
from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PASS = "pass"
    DRIFT = "drift"
    CONVERT_ERROR = "convert-error"
    LOAD_ERROR = "load-error"
    RUN_ERROR = "run-error"
    FALLBACK = "fallback"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    SKIPPED = "skipped"


#: every status, in the report's order
STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
#: the statuses of a target that failed (a gating one fails the check)
FAILING: frozenset[Status] = frozenset(Status) - {Status.PASS, Status.SKIPPED}
#: the statuses of a target that ran to its outputs and was compared (``pass`` or ``drift``)
COMPARED: tuple[Status, ...] = (Status.PASS, Status.DRIFT)
#: a worker that died (a signal) or overran its time
DIED: frozenset[Status] = frozenset({Status.TIMEOUT, Status.CRASHED})
#: the statuses of a target that never gave outputs: a converter, loader or run failed, or its worker died
ERRORS: frozenset[Status] = frozenset({Status.CONVERT_ERROR, Status.LOAD_ERROR, Status.RUN_ERROR}) | DIED
#: how bad each failure is, from ``pass`` up (``skipped`` has no rank): a run's worst status is its highest
RANK: dict[Status, int] = {Status.PASS: 0, Status.FALLBACK: 1, Status.DRIFT: 2, Status.RUN_ERROR: 3,
                           Status.LOAD_ERROR: 4, Status.CONVERT_ERROR: 5, Status.TIMEOUT: 6, Status.CRASHED: 6}
#: a worker's own outcome, before any comparison: ``ok`` or the failure it ended in
OK = "ok"
WORKER: tuple[str, ...] = (OK, Status.CONVERT_ERROR, Status.LOAD_ERROR, Status.RUN_ERROR, Status.SKIPPED,
                           Status.TIMEOUT, Status.CRASHED)


def worst(statuses) -> Status | None:
    """The worst of ``statuses`` by :data:`RANK` (the first of equals); None when none has a rank."""
    ranked = [Status(s) for s in statuses if s in RANK]
    return max(ranked, key=RANK.__getitem__) if ranked else None


def worker_status(s: str) -> "Status | str":
    """A worker's outcome read from its text: :data:`OK`, or the :class:`Status` it failed with."""
    if s == OK:
        return OK
    if s not in WORKER:
        raise ValueError(f"unknown worker status {s!r} (one of {', '.join(WORKER)})")
    return Status(s)
