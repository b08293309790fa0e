"""A Markdown summary for a CI job summary or a pull-request comment: the verdict, the failing targets
first with what failed, then one table row per target."""
from __future__ import annotations

from pathlib import Path

from portability.report.diff import Diff
from portability.report.schema import Report, TargetResult
from portability.report.table import explain, worst

ICON = {"pass": "✅", "drift": "❌", "skipped": "⏭️", "fallback": "⚠️"}


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _num(v, fmt: str) -> str:
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    return format(v, fmt)


def _size(n: int | None) -> str:
    if not n:
        return "–"
    return f"{n / 1024:.1f} KB" if n < 2**20 else f"{n / 2**20:.2f} MB"


def _row(t: TargetResult) -> str:
    m = t.metrics or {}
    max_abs, cos = worst(t)
    lat = m.get("latency_ms") or {}
    acc = m.get("accuracy")
    acc_s = "–" if acc is None else f"{acc:.4f}" + (f" ({m['accuracy_delta']:+.4f})" if m.get("accuracy_delta") else "")
    status = f"{ICON.get(t.status, '❌')} {t.status}" + ("" if t.gating else " (cross-check)")
    p50 = _num(lat.get("p50"), ".3f") + (" (emulated)" if lat.get("emulated") else "")
    cells = [f"`{t.id}`", status, _num(max_abs, ".1e"), _num(cos, ".6f"), _num(m.get("top1_agreement"), ".4f"), acc_s,
             _size((t.artifact or {}).get("size_bytes")), p50, _num(m.get("p50_vs_reference"), ".2f")]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _robustness(report: Report) -> list[str]:
    from portability.metrics.robustness import SUMMARY_HEAD, summary

    rows = [(t.id, summary(t.metrics or {})) for t in report.targets]
    rows = [(tid, cells) for tid, cells in rows if cells]
    if not rows:
        return []
    return (["", "### Robustness", "", "| " + " | ".join(SUMMARY_HEAD) + " |", "|---|--:|--:|---|--:|--:|"]
            + ["| " + " | ".join(_cell(c) for c in [f"`{tid}`"] + cells) + " |" for tid, cells in rows])


def _what_failed(t: TargetResult) -> str:
    parts = list(t.breaches) or ([t.error] if t.error else [t.status])
    if t.op:
        parts.append(f"op `{t.op}`" + (f" (node `{t.node}`)" if t.node else ""))
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
    n = {s: sum(t.status == s for t in report.targets) for s in ("pass", "skipped")}
    lines = [f"## portability: {verdict} — `{name}`", "",
             f"{len(report.targets)} targets: {n['pass']} passed, {len(failing)} gating failed, "
             f"{len(cross)} cross-checks disagree, {n['skipped']} skipped. Reference: `{report.reference}`; "
             f"model sha256 `{str(report.model.get('sha256', ''))[:12]}`.", ""]
    if regressed:
        lines += ["Regressed since the baseline: " + ", ".join(
            f"`{c.target}` ({c.metric})" for c in diff.gating_regressions), ""]
    if failing or cross:
        lines += ["### Failing targets", ""]
        lines += [f"- ❌ `{t.id}` **{t.status}**: {_cell(_what_failed(t))}" for t in failing]
        lines += [f"- ⚠️ `{t.id}` {t.status} (cross-check, not gating): {_cell(_what_failed(t))}" for t in cross]
        lines.append("")
    if diff is not None:
        lines += _diff_lines(diff)
    lines += ["| target | status | max \\|Δ\\| | cosine | top-1 | accuracy | size | p50 ms | × ref |",
              "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    lines += [_row(t) for t in report.targets]
    lines += _robustness(report)
    from portability.report.versions import tables

    for pkg, head, rows in tables(report):
        lines += ["", f"### Versions of {pkg}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    notes = list(report.notes) + [f"`{t.id}`: {explain(t)}" for t in report.targets
                                  if t.status == "skipped" and explain(t)]
    if notes:
        lines += ["", "<details><summary>Notes</summary>", ""] + [f"- {_cell(x)}" for x in notes] + ["", "</details>"]
    return "\n".join(lines) + "\n"
