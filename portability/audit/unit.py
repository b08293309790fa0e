"""One model of an audit, checked as ``check`` checks it: the unit of work that every executor runs, and
its result (:class:`ModelResult`), which crosses the Ray boundary and lands in the audit's state as JSON."""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from portability.audit.corpus import Item
from portability.core.errors import UsageError
from portability.core.status import FAILING, Status, worst

#: the words of audits written before a model's status was a target's: passed / failed / error
_LEGACY = {"passed": Status.PASS, "error": Status.LOAD_ERROR}


def model_status(passed: bool, targets: list[dict]) -> Status:
    """A checked model's status: ``pass`` when its report passed, else that of its worst failing gating
    target (of its worst failing target where no gating one failed)."""
    if passed:
        return Status.PASS
    failing = [t for t in targets if t["status"] in FAILING]
    return (worst(t["status"] for t in failing if t.get("gating", True)) or worst(t["status"] for t in failing)
            or Status.RUN_ERROR)


@dataclass(frozen=True)
class ModelResult:
    """One model of an audit: its status in the check's words, the error of a model the check refused
    (``load-error``, no targets) or of a worker that died, its targets as the JSON report has them (their
    ``status`` a :class:`Status`), and the whole report (``report``, for its own page)."""

    path: str
    status: Status
    error: str | None = None
    targets: tuple[dict, ...] = ()
    name: str | None = None
    op: str | None = None
    model: dict | None = None
    reference: str | None = None
    report: dict | None = None
    #: a conformance case's versions record (converted down, or still unreadable by the reference)
    versions: dict | None = None
    #: read from the audit's state: an earlier run finished it
    resumed: bool = False

    @property
    def passed(self) -> bool:
        return self.status == Status.PASS

    @property
    def refused(self) -> bool:
        """The check could not be run on this model at all (no target has a result)."""
        return not self.targets and not self.passed

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, **({"name": self.name} if self.name else {}),
                             **({"op": self.op} if self.op else {}), "status": str(self.status), "error": self.error,
                             "targets": [{**t, "status": str(t["status"])} for t in self.targets]}
        d.update({k: getattr(self, k) for k in ("model", "reference", "report", "versions") if getattr(self, k) is not None})
        return {**d, **({"resumed": True} if self.resumed else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelResult":
        targets = tuple({**t, "status": Status(t["status"])} for t in d.get("targets") or ())
        s = d["status"]
        status = _LEGACY.get(s) or (model_status(False, list(targets)) if s == "failed" else Status(s))
        known = {f.name for f in fields(cls)} - {"status", "targets"}
        return cls(status=status, targets=targets, **{k: v for k, v in d.items() if k in known})


def check_one(item: Item, base: dict, flags: dict, session=None) -> ModelResult:
    """One model checked as ``check`` would (never raises for the model's sake): a model the check refused
    (a bad model or bad settings) is a ``load-error`` with its message. A conformance case's targets each
    get ``spec``: their outputs against the case's expected ones."""
    from portability.settings.options import resolve
    from portability.engine.pipeline import check as run_check
    from portability.report.files import to_json

    head = {"path": str(item.path), "name": item.name, "op": item.op,
            **({"versions": item.versions} if item.versions else {})}
    kept: dict = {}
    try:
        opts = resolve(base, item.settings, flags)
        report = run_check(item.path, opts, session=session, kept=kept if item.expected else None)
    except UsageError as e:  # a bad model or bad settings: this model's result, not the audit's end
        return ModelResult(status=Status.LOAD_ERROR, error=str(e), **head)
    d = json.loads(to_json(report))
    if item.expected is not None:
        from portability.audit.conformance import against_spec

        against_spec(d["targets"], kept.get("outputs") or {}, Path(item.expected), item.tolerance)
    return ModelResult.from_dict({**head, "status": model_status(report.passed, d["targets"]), "targets": d["targets"],
                                  "model": d["model"], "reference": d["reference"], "report": d})
