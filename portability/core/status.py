"""A target's status: the one vocabulary of the report (DESIGN.md), owned here and used everywhere.

A :class:`Status` is a ``str`` (``Status.PASS == "pass"``), so reports, JSON and the history keep their plain
strings. The worker decides its own outcome (:data:`WORKER`: ``ok`` or the failure it ended in), the runner
the outcome of a worker that died or overran, and the verdict (``engine/verdict.py``) the final status of
a target that ran: ``pass``, ``drift`` or ``fallback``.
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
FAILING: frozenset[str] = frozenset(STATUSES) - {Status.PASS, Status.SKIPPED}
#: a worker's own outcome, before any comparison: ``ok`` or the failure it ended in
OK = "ok"
WORKER: tuple[str, ...] = (OK, Status.CONVERT_ERROR, Status.LOAD_ERROR, Status.RUN_ERROR, Status.SKIPPED,
                           Status.TIMEOUT, Status.CRASHED)
