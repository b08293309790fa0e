"""The shapes x targets table of a ``check --shape-grid`` report (``inputs.grid``, made by ``engine/grid.py``)
as plain rows: a row per target, a column per shape, each cell the target's status at that shape. The terminal
and Markdown render these rows."""
from __future__ import annotations

from portability.report.schema import Report


def rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """The shapes x targets table of ``inputs.grid``: (header, rows); empty without a grid."""
    g = (report.inputs or {}).get("grid") or {}
    if not g:
        return [], []
    shapes = list(g.get("shapes") or [])
    head = ["target"] + [s + (" (converted)" if s == g.get("converted_at") else "") for s in shapes]
    return head, [[tid] + [cells.get(s) or "–" for s in shapes] for tid, cells in (g.get("targets") or {}).items()]
