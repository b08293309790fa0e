"""The runtime-version matrix of a report (``check --versions``) as plain rows: one table per package,
a row per target, a column per version; each cell the target's status at that version and its worst
absolute difference from the other versions' outputs. The terminal, HTML and Markdown render these rows."""
from __future__ import annotations

from portability.report.schema import Report


def _cell(c: dict | None) -> str:
    if c is None:
        return "–"
    w = c.get("worst_max_abs_vs_others")
    return c["status"] + ("" if w is None else f", max |Δ| vs others {w:.2g}")


def tables(report: Report) -> list[tuple[str, list[str], list[list[str]]]]:
    """[(package, header, rows)], empty without ``--versions``."""
    m = report.versions or {}
    out = []
    for pkg, versions in (m.get("packages") or {}).items():
        rows = [[r["target"]] + [_cell(r["cells"].get(v)) for v in versions]
                for r in m.get("rows") or [] if r.get("package") == pkg]
        out.append((pkg, ["target"] + [f"{pkg} {v}" for v in versions], rows))
    return out
