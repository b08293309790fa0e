"""The report's ``versions`` after the run: per base target, each version's status and its worst absolute
difference from the other versions' outputs."""
from __future__ import annotations


def compare(results, outputs: dict[str, dict], info: dict[str, dict]) -> dict:
    """The report's ``versions`` ({} without ``--versions``). ``results``: the check's ``TargetResult``s;
    ``outputs``: target id -> output name -> array, of every target that ran; ``info``: what ``expand``
    recorded of each target in the matrix."""
    from portability.metrics import drift

    if not info:
        return {}
    by_id = {r.id: r for r in results}
    rows: dict[str, dict] = {}
    for tid, meta in info.items():
        r = by_id.get(tid)
        if r is None:
            continue
        rows.setdefault(meta["base"], {"target": meta["base"], "package": meta["package"], "cells": {}})
        rows[meta["base"]]["cells"][meta["version"] or "installed"] = {"id": tid, "status": r.status}
    for row in rows.values():
        cells = row["cells"]
        for v, cell in cells.items():
            worst = None
            for w, other in cells.items():
                a, b = outputs.get(cell["id"]), outputs.get(other["id"])
                if w == v or not a or not b:
                    continue
                per, _, _ = drift.compare(b, a)
                m = drift.worst({"outputs": per})[0] or 0.0
                worst = m if worst is None else max(worst, m)
            cell["worst_max_abs_vs_others"] = worst
    packages = sorted({r["package"] for r in rows.values()})
    return {"packages": {p: sorted({v for r in rows.values() if r["package"] == p for v in r["cells"]}) for p in packages},
            "rows": list(rows.values())}
