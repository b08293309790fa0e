"""A Markdown summary for a CI job summary or a pull-request comment: the verdict, the failing targets
first with what failed, then one table row per target."""
from __future__ import annotations

from pathlib import Path

from portability.core.status import Status
from portability.report.diff import Diff
from portability.report.schema import Report, TargetResult
from portability.runtimes.base import off_backend
from portability.report.table import explain

ICON = {Status.PASS: "✅", Status.DRIFT: "❌", Status.SKIPPED: "⏭️", Status.FALLBACK: "⚠️"}


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _row(t: TargetResult, cols: list) -> str:
    status = f"{ICON.get(t.status, '❌')} {t.status}" + ("" if t.gating else " (cross-check)")
    cells = [f"`{t.id}`", status] + [c.cell(t, "markdown") for c in cols]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _what_failed(t: TargetResult) -> str:
    parts = list(t.breaches) or ([t.error] if t.error else [t.status])
    if t.op:
        parts.append(f"op `{t.op}`" + (f" (node `{t.node}`)" if t.node else ""))
    if t.route:
        parts.append(f"route {t.route}")
    return "; ".join(parts)


def _diff_lines(d: Diff) -> list[str]:
    if not d.changes:
        return [f"No change beyond noise since the baseline ({d.before}).", ""]
    lines = [f"### Changes since the baseline ({d.before})", ""]
    for c in d.changes:
        mark = "🔻 **regression**" if c.regression and c.gating else "🔻 regression (cross-check)" if c.regression else "·"
        lines.append(f"- {mark} `{c.target}` {c.metric}: {_cell(c.text)}")
    return lines + [""]


def render(report: Report, diff: Diff | None = None) -> str:
    name = Path(str(report.model.get("path", "model"))).name
    failing = [t for t in report.targets if t.failed and t.gating]
    cross = [t for t in report.targets if t.failed and not t.gating]
    regressed = diff is not None and bool(diff.gating_regressions)
    ok = report.passed and not regressed
    verdict = "✅ **passed**" if ok else "❌ **failed**"
    n = {s: sum(t.status == s for t in report.targets) for s in (Status.PASS, Status.SKIPPED)}
    lines = [f"## portability: {verdict} — `{name}`", "",
             f"{len(report.targets)} targets: {n[Status.PASS]} passed, {len(failing)} gating failed, "
             f"{len(cross)} cross-checks disagree, {n[Status.SKIPPED]} skipped. Reference: `{report.reference}`; "
             f"model sha256 `{str(report.model.get('sha256', ''))[:12]}`.", ""]
    if regressed:
        lines += ["Regressed since the baseline: " + ", ".join(
            f"`{c.target}` ({c.metric})" for c in diff.gating_regressions), ""]
    if failing or cross:
        lines += ["### Failing targets", ""]
        lines += [f"- ❌ `{t.id}` **{t.status}**: {_cell(_what_failed(t))}" for t in failing]
        lines += [f"- ⚠️ `{t.id}` {t.status} (cross-check, not gating): {_cell(_what_failed(t))}" for t in cross]
        lines.append("")
    from portability.report import localized

    if localized.found(report) or localized.fixes(report):
        lines += ["### Where it diverges, and what fixes it", ""]
        lines += [f"- `{tid}`: {localized.line(doc)}" for tid, doc in localized.found(report)]
        lines += [f"- `{tid}` --fix: {localized.fix_line(doc)}" for tid, doc in localized.fixes(report)] + [""]
    if diff is not None:
        lines += _diff_lines(diff)
    from types import SimpleNamespace

    from portability.metrics import columns, sections

    cols = columns("markdown", report)
    lines += ["| " + " | ".join(["target", "status"] + [c.head("markdown") for c in cols]) + " |",
              "|---|---|" + "--:|" * len(cols)]
    lines += [_row(t, cols) for t in report.targets]
    page = SimpleNamespace(cell=_cell)
    for sec in sections("markdown"):
        text = sec.render(report, page)
        lines += text.split("\n") if text else []
    from portability.report.version_tables import tables

    for pkg, head, rows in tables(report):
        lines += ["", f"### Versions of {pkg}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    from portability.report.grid import rows as grid_rows

    head, rows = grid_rows(report)
    if rows:
        lines += ["", "### Shapes × targets", "", "| " + " | ".join(_cell(c) for c in head) + " |",
                  "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    notes = list(report.notes) + [f"`{t.id}`: {explain(t)}" for t in report.targets
                                  if t.status == Status.SKIPPED and explain(t)]
    notes += [f"`{t.id}`: {off_backend(t.details)}" for t in report.targets
              if t.status != Status.FALLBACK and off_backend(t.details)]  # a partial placement, reported only
    if notes:
        lines += ["", "<details><summary>Notes</summary>", ""] + [f"- {_cell(x)}" for x in notes] + ["", "</details>"]
    return "\n".join(lines) + "\n"
