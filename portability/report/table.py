"""The terminal table: one row per target."""
from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

from portability.report.schema import Report, TargetResult

STYLE = {"pass": "green", "drift": "bold red", "fallback": "yellow", "skipped": "dim", "timeout": "red",
         "crashed": "red", "convert-error": "red", "load-error": "red", "run-error": "red"}


def _num(v: float | None, fmt: str = ".1e") -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and not math.isfinite(v):
        return "inf"
    return format(v, fmt)


def _size(n: int | None) -> str:
    if n is None:
        return "–"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def worst(t: TargetResult) -> tuple[float | None, float | None]:
    outs = t.metrics.get("outputs") or {}
    if not outs:
        return None, None
    return max(o["max_abs"] for o in outs.values()), min(o["cosine"] for o in outs.values())


def explain(t: TargetResult) -> str:
    parts = []
    if t.error:
        parts.append(t.error)
    parts += list(t.breaches)
    if t.op:
        parts.append(f"op {t.op}" + (f" (node {t.node})" if t.node else ""))
    if t.hint:
        parts.append(f"fix: {t.hint}")
    parts += list(t.notes)
    return "; ".join(parts)


def render(report: Report) -> Table:
    table = Table(title=f"{report.model['path']}  (reference: {report.reference})", title_justify="left", expand=False)
    from portability.metrics.robustness import worst_flip

    robust = any((t.metrics or {}).get("robustness") for t in report.targets)
    for col, just in (("target", "left"), ("status", "left"), ("max |Δ|", "right"), ("cosine", "right"),
                      ("top-1", "right"), ("accuracy", "right"), ("size", "right"), ("p50 ms", "right"),
                      ("× ref", "right")) + ((("worst flip", "right"),) if robust else ()):
        table.add_column(col, justify=just, no_wrap=True)
    for t in report.targets:
        m = t.metrics or {}
        max_abs, cos = worst(t)
        lat = m.get("latency_ms") or {}
        status = t.status + ("" if t.gating else " (x-check)")
        acc = m.get("accuracy")
        acc_s = "–" if acc is None else f"{acc:.4f}" + (f" ({m['accuracy_delta']:+.4f})" if m.get("accuracy_delta") else "")
        table.add_row(
            t.id, Text(status, style=STYLE.get(t.status, "")), _num(max_abs), _num(cos, ".6f"),
            _num(m.get("top1_agreement"), ".4f"), acc_s, _size((t.artifact or {}).get("size_bytes")),
            _num(lat.get("p50"), ".3f") + (" emu" if lat.get("emulated") else ""), _num(m.get("p50_vs_reference"), ".2f"),
            *((_num(worst_flip(m), ".3f"),) if robust else ()),
        )
    return table


def versions(report: Report) -> list[Table]:
    """The runtime-version matrix (``check --versions``): a table per package."""
    from portability.report.versions import tables

    out = []
    for pkg, head, rows in tables(report):
        t = Table(title=f"versions of {pkg}: status, and worst |Δ| against the other versions' outputs",
                  title_justify="left", expand=False)
        for i, col in enumerate(head):
            t.add_column(col, justify="left", no_wrap=i == 0)
        for row in rows:
            t.add_row(*row)
        out.append(t)
    return out


def explanations(report: Report) -> list[tuple[str, str]]:
    """(target id, why) for every target that did not simply pass."""
    return [(t.id, explain(t)) for t in report.targets if t.status != "pass" and explain(t)]
