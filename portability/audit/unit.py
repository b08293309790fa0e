"""One model of an audit, checked as ``check`` checks it: the unit of work that every executor runs."""
from __future__ import annotations

import json
from pathlib import Path

from portability.audit.corpus import Item
from portability.core.errors import UsageError


def check_one(item: Item, base: dict, flags: dict, session=None) -> dict:
    """One model checked as ``check`` would; an entry of the audit (never raises for the model's sake): the
    model's status, its targets as the JSON report has them, and the whole report (``report``, for its own
    page). A conformance case's targets each get ``spec``: their outputs against the case's expected ones."""
    from portability.settings.options import resolve
    from portability.engine.pipeline import check as run_check
    from portability.report.files import to_json

    head = {"path": str(item.path), **({"name": item.name} if item.name else {}), **({"op": item.op} if item.op else {})}
    kept: dict = {}
    try:
        opts = resolve(base, item.settings, flags)
        report = run_check(item.path, opts, session=session, kept=kept if item.expected else None)
    except UsageError as e:  # a bad model or bad settings: this model's result, not the audit's end
        return {**head, "status": "error", "error": str(e), "targets": []}
    d = json.loads(to_json(report))
    if item.expected is not None:
        from portability.audit.conformance import against_spec

        against_spec(d["targets"], kept.get("outputs") or {}, Path(item.expected), item.tolerance)
    return {**head, "status": "passed" if report.passed else "failed", "error": None,
            "targets": d["targets"], "model": d["model"], "reference": d["reference"], "report": d}
