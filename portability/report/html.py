"""The HTML report: one self-contained file (inline CSS and SVG plots, no script, nothing fetched) that
a person reads: the verdict per platform and target at a glance, the plots, then drift per output,
accuracy, size, latency, the conversions, the errors and the notes."""
from __future__ import annotations

import math
from html import escape
from pathlib import Path
from types import SimpleNamespace

from portability.core.status import Status
from portability.report.diff import Diff
from portability.report.schema import Report, TargetResult
from portability.runtimes.base import off_backend

#: the statuses with a pill style of their own; every other is styled as an error
_OWN_STYLE = (Status.PASS, Status.DRIFT, Status.FALLBACK, Status.SKIPPED)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{padding:12px 16px;border-radius:6px;color:#fff;font-size:18px;font-weight:600}
.verdict.pass{background:#2e7d32}.verdict.fail{background:#c62828}
.meta{color:#555;font-size:13px;margin:6px 0}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border:1px solid #e0e0e0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pill{display:inline-block;padding:2px 8px;margin:2px;border-radius:10px;font-size:12px;color:#fff;white-space:nowrap}
.s-pass{background:#2e7d32}.s-drift{background:#c62828}.s-fallback{background:#ef6c00}.s-skipped{background:#9e9e9e}
.s-error{background:#b71c1c}.xcheck{opacity:.65}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:16px}
figure{margin:0;background:#fff;border:1px solid #e0e0e0;border-radius:6px;padding:8px}
figure svg{width:100%;height:auto;display:block}figcaption{font-weight:600;margin-bottom:4px}
.ref{font-weight:600;color:#1565c0}.bad{color:#c62828;font-weight:600}code{font-size:12px}
ul{margin:4px 0 4px 20px;padding:0}
"""


def _e(v) -> str:
    return escape(str(v), quote=True)


def _num(v, fmt: str = ".3g") -> str:
    if v is None:
        return "–"
    if isinstance(v, str):
        return _e(v)
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else "nan"
    return format(v, fmt)


def _pill(t: TargetResult) -> str:
    cls = t.status if t.status in _OWN_STYLE else "error"
    x = "" if t.gating else " xcheck"
    tip = t.status + ("" if t.gating else " (cross-check)")
    return f'<span class="pill s-{cls}{x}" title="{_e(tip)}">{_e(t.id.split("/", 1)[-1])}: {_e(t.status)}</span>'


def _table(head: list[str], rows: list[list[str]], numeric_from: int = 1) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i >= numeric_from else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _glance(report: Report) -> str:
    platforms = list(dict.fromkeys(t.platform for t in report.targets))
    rows = []
    for p in platforms:
        ts = [t for t in report.targets if t.platform == p]
        bad = [t for t in ts if t.failed and t.gating]
        cross = sum(t.failed and not t.gating for t in ts)
        if bad:
            verdict = f'<span class="bad">{len(bad)} failing</span>'
        elif all(t.status == Status.SKIPPED for t in ts):
            verdict = "not run here"
        else:
            verdict = "ok" + (f" ({cross} cross-check{'s' if cross > 1 else ''} disagree{'' if cross > 1 else 's'})" if cross else "")
        rows.append([f"<b>{_e(p)}</b>", verdict, "".join(_pill(t) for t in ts)])
    return _table(["platform", "verdict", "targets (faded: cross-check, never fails the run)"], rows, numeric_from=9)


def _targets(report: Report) -> str:
    from portability.metrics import columns

    cols = columns("html", report)
    rows = []
    for t in report.targets:
        ident = f'<span class="ref">{_e(t.id)} (reference)</span>' if t.id == report.reference else _e(t.id)
        rows.append([ident, _pill(t), "yes" if t.gating else "cross-check", _e(t.runtime or "–"), _e(t.device or "–")]
                    + [_e(c.cell(t, "html")) for c in cols] + [_num(t.duration_s, ".1f")])
    return _table(["target", "status", "gating", "runtime", "device"] + [c.head("html") for c in cols] + ["took s"],
                  rows, numeric_from=5)


#: what a metric's section is given to draw with (``metrics.base.Section``)
PAGE = SimpleNamespace(e=lambda v: _e(v), num=lambda v, fmt=".3g": _num(v, fmt),
                       table=lambda head, rows, numeric_from=1: _table(head, rows, numeric_from))


def _sections(report: Report, place: str) -> list[tuple[str, str]]:
    from portability.metrics import sections

    return [(sec.title, text) for sec in sections("html", place) if (text := sec.render(report, PAGE))]


def _conversions(report: Report) -> str:
    rows = []
    for t in report.targets:
        conv = (t.details or {}).get("conversions") or []
        if not conv:
            continue
        chain = " → ".join(f"<code>{_e(c.get('converter', '?'))}</code> ({'cached' if c.get('cached') else _num(c.get('seconds'), '.2f') + ' s'})"
                           for c in conv)
        rows.append([_e(t.id), f"{_e(report.model.get('path', 'source'))} → {chain} → {_e((t.artifact or {}).get('format', '?'))}"])
    return _table(["target", "chain of conversions"], rows, numeric_from=9) if rows else "<p>No conversions recorded.</p>"


def _problems(report: Report) -> str:
    items = []
    for t in report.targets:
        placed = off_backend(t.details) if t.status != Status.FALLBACK else None  # a partial placement, reported only
        if t.status == Status.PASS and not t.notes and not placed:
            continue
        parts = ([f"<b>{_e(t.status)}</b>"] + ([_e(t.error)] if t.error else []) + [_e(b) for b in t.breaches]
                 + ([_e(placed)] if placed else [])
                 + ([f"op <code>{_e(t.op)}</code>" + (f" (node <code>{_e(t.node)}</code>)" if t.node else "")] if t.op else [])
                 + ([f"fix: <code>{_e(t.hint)}</code>"] if t.hint else []) + [_note(n) for n in t.notes])
        items.append(f"<li><b>{_e(t.id)}</b>: {'; '.join(parts)}</li>")
    notes = "".join(f"<li>{_note(n)}</li>" for n in report.notes)
    out = f"<ul>{''.join(items)}</ul>" if items else "<p>Every target passed.</p>"
    return out + (f"<h3>Notes</h3><ul>{notes}</ul>" if notes else "")


def _note(n: str) -> str:
    """A note; a warning (calibration on synthesized inputs: ``report/calibration.py``) marked as one."""
    from portability.report.calibration import is_warning

    return f'<span class=bad>warning: {_e(n)}</span>' if is_warning(n) else _e(n)


def _diff(d: Diff) -> str:
    if not d.changes:
        return f"<p>No change beyond noise since the baseline ({_e(d.before)}).</p>"
    rows = [[_e(c.target), _e(c.metric), _e(c.text),
             '<span class="bad">regression</span>' if c.regression and c.gating else "regression (cross-check)" if c.regression else "change"]
            for c in d.changes]
    notes = "".join(f"<li>{_e(n)}</li>" for n in d.notes)
    return f"<p class=meta>Baseline: {_e(d.before)}.</p>" + _table(["target", "metric", "change", "verdict"], rows, numeric_from=9) + (f"<ul>{notes}</ul>" if notes else "")


def _environment(report: Report) -> str:
    env = report.environment or {}
    pk = ", ".join(f"{_e(k)} {_e(v)}" for k, v in (env.get("packages") or {}).items())
    return (f"<p class=meta>Python {_e(env.get('python', '?'))} · {_e(env.get('platform', '?'))} · {_e(env.get('cpu', '?'))}"
            f" · {_e(env.get('cores', '?'))} cores<br>{pk}</p>")


def _plots(report: Report) -> str:
    from portability.report.plots import all_plots

    figs = [f"<figure><figcaption>{_e(title)}</figcaption>{svg}</figure>" for title, svg in all_plots(report) if svg]
    return f'<div class="plots">{"".join(figs)}</div>' if figs else "<p>Nothing to plot: no target ran.</p>"


def render(report: Report, diff: Diff | None = None) -> str:
    name = Path(str(report.model.get("path", "model"))).name
    failing = [t.id for t in report.targets if t.failed and t.gating]
    regressed = [f"{c.target} ({c.metric})" for c in diff.gating_regressions] if diff else []
    ok = report.passed and not regressed
    why = ("every gating target is within its thresholds" if ok else
           "; ".join(filter(None, [f"failing: {', '.join(failing)}" if failing else "",
                                   f"regressed since the baseline: {', '.join(regressed)}" if regressed else ""])))
    inp = report.inputs or {}
    meta = (f"sha256 <code>{_e(report.model.get('sha256', ''))}</code> · opset {_e(report.model.get('opset', '?'))} · "
            f"{_e(report.model.get('producer', ''))} · inputs: {_e(inp.get('source'))}, {_e(inp.get('samples'))} samples"
            f"{' from ' + _e(inp['path']) if inp.get('path') else ''} · reference <span class=ref>{_e(report.reference)}</span>"
            f" · {_e(report.created_at)} · portability {_e(report.tool.get('version', ''))}")
    sections = [("At a glance", _glance(report)), ("Plots", _plots(report)), ("Targets", _targets(report))]
    if diff is not None:
        sections.append(("Changes since the baseline", _diff(diff)))
    sections += _sections(report, "summary")
    from portability.report import localized

    if (where := localized.html(report, _e)) is not None:
        sections.append(("Where it diverges, and what fixes it", where))
    from portability.report.version_tables import tables

    sections += [(f"Versions of {pkg}", "<p class=meta>Each version's status, and its worst absolute difference "
                  "from the other versions' outputs on the same inputs.</p>" + _table([_e(h) for h in head],
                  [[_e(c) for c in row] for row in rows])) for pkg, head, rows in tables(report)]
    sections += _sections(report, "detail") + [("Conversions", _conversions(report)),
                 ("Errors, breaches and notes", _problems(report)), ("Environment", _environment(report))]
    body = "".join(f"<section><h2>{_e(h)}</h2>{s}</section>" for h, s in sections)
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\">"
            f"<title>portability: {_e(name)} — {'passed' if ok else 'failed'}</title><style>{CSS}</style></head><body><main>"
            f"<h1>portability report — {_e(name)}</h1><div class=\"verdict {Status.PASS if ok else 'fail'}\">"
            f"{'PASSED' if ok else 'FAILED'}: {_e(why)}</div><p class=meta>{meta}</p>{body}</main></body></html>\n")
