"""The terminal table: one row per target."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text

from portability.core.status import Status
from portability.report.schema import Report, TargetResult

STYLE = {Status.PASS: "green", Status.DRIFT: "bold red", Status.FALLBACK: "yellow", Status.SKIPPED: "dim",
         Status.TIMEOUT: "red", Status.CRASHED: "red", Status.CONVERT_ERROR: "red", Status.LOAD_ERROR: "red",
         Status.RUN_ERROR: "red"}


def explain(t: TargetResult) -> str:
    parts = []
    if t.error:
        parts.append(t.error)
    parts += list(t.breaches)
    if t.op:
        parts.append(f"op {t.op}" + (f" (node {t.node})" if t.node else ""))
    if t.failed and t.route:
        parts.append(f"route {t.route}")
    if t.hint:
        parts.append(f"fix: {t.hint}")
    parts += list(t.notes)
    return "; ".join(parts)


def render(report: Report) -> Table:
    """A row per target: its id and status, then every metric's terminal columns (``metrics.columns``)."""
    from portability.metrics import columns

    table = Table(title=f"{report.model['path']}  (reference: {report.reference})", title_justify="left", expand=False)
    cols = columns("terminal", report)
    table.add_column("target", justify="left", no_wrap=True)
    table.add_column("status", justify="left", no_wrap=True)
    for c in cols:
        table.add_column(c.head("terminal"), justify="right", no_wrap=True)
    for t in report.targets:
        status = t.status + ("" if t.gating else " (x-check)")
        table.add_row(t.id, Text(status, style=STYLE.get(t.status, "")), *(c.cell(t, "terminal") for c in cols))
    return table


def versions(report: Report) -> list[Table]:
    """The runtime-version matrix (``check --versions``): a table per package; then the shapes x targets
    table (``check --shape-grid``)."""
    from portability.report.version_tables import tables

    out = []
    for pkg, head, rows in tables(report):
        t = Table(title=f"versions of {pkg}: status, and worst |Δ| against the other versions' outputs",
                  title_justify="left", expand=False)
        for i, col in enumerate(head):
            t.add_column(col, justify="left", no_wrap=i == 0)
        for row in rows:
            t.add_row(*row)
        out.append(t)
    from portability.report.grid import rows as grid_rows

    head, rows = grid_rows(report)
    if rows:
        t = Table(title="shapes x targets: status at each shape (artifacts converted at the first)",
                  title_justify="left", expand=False)
        for i, col in enumerate(head):
            t.add_column(col, justify="left", no_wrap=i == 0)
        for row in rows:
            t.add_row(*(Text(c) for c in row))
        out.append(t)
    return out


def explanations(report: Report) -> list[tuple[str, str]]:
    """(target id, why) for every target that did not simply pass."""
    return [(t.id, explain(t)) for t in report.targets if t.status != Status.PASS and explain(t)]
