"""What ``check`` does with a report once it exists: the files (HTML, Markdown), the history, and the
comparison with a baseline. Kept here so the check command itself stays a list of options."""
from __future__ import annotations

import importlib.util
import os
from dataclasses import fields
from pathlib import Path

from portability.core.availability import install
from portability.core.errors import UsageError
from portability.report.diff import Diff, Tolerances
from portability.report.schema import Report


def require_writable(*paths: Path | None) -> None:
    for p in paths:
        if p is not None and not (p.parent.is_dir() and os.access(p.parent, os.W_OK)):
            raise UsageError(f"cannot write a report to {p}: its folder does not exist or is not writable")


def require_plotting(html: Path | None) -> None:
    if html is not None and importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--html draws its plots with matplotlib, which is not installed ({install('report')})")


def tolerances(cfg: dict, latency: bool, size_growth: float | None) -> Tolerances:
    """Regression tolerances: the defaults, then ``[tool.portability.regression]``, then flags."""
    known = {f.name for f in fields(Tolerances)}
    table = dict(cfg.get("regression") or {})
    bad = [k for k in table if k not in known]
    if bad:
        raise UsageError(f"unknown regression setting '{bad[0]}' (known: {', '.join(sorted(known))})")
    for k, v in table.items():
        if isinstance(v, bool) != (k == "gate_latency") or not isinstance(v, (int, float)) or v < 0:
            raise UsageError(f"regression setting '{k}' must be a {'true/false' if k == 'gate_latency' else 'non-negative number'}")
    if size_growth is not None:
        table["size_growth"] = size_growth
    if latency:
        table["gate_latency"] = True
    return Tolerances(**table)


def load_baseline(spec: str | None) -> tuple | None:
    """The baseline named by ``--baseline`` / ``baseline =``: a history run id, a JSON report or a
    ``--save-outputs`` file, as (report, label, its kept outputs, their digests or None). Exit 2
    (UsageError) when it is missing or unreadable."""
    if not spec:
        return None
    from portability.report import baseline

    report, label = baseline.load(spec)
    return report, label, baseline.outputs(spec)


def require_comparable(base: tuple[Report, str] | None, model: dict) -> None:
    """Exit 2 when the baseline is of a model with other inputs/outputs."""
    if base is not None:
        from portability.report import baseline

        baseline.require_comparable(base[0], model, base[1])


def compare(base: tuple | None, report: Report, tol: Tolerances, golden=None) -> Diff | None:
    """What changed since the baseline; with both runs' kept outputs, output by output too."""
    if base is None:
        return None
    from portability.report.diff import diff

    return diff(base[0], report, tol, labels=(base[1], "this check"), outputs=(base[2], golden))


def change_lines(d: Diff | None) -> list[str]:
    """Rich-markup lines saying what changed since the baseline (regressions of gating targets in red)."""
    if d is None:
        return []
    lines = [f"  [yellow]note:[/] {n}" for n in d.notes]
    for c in d.changes:
        tag = "[red]regression[/]" if c.regression and c.gating else "regression (cross-check)" if c.regression else "change"
        lines.append(f"  {tag} vs {d.before}: [bold]{c.target}[/] {c.text}")
    return lines or [f"  no change beyond noise since {d.before}"]


def write_files(report: Report, d: Diff | None, html: Path | None, markdown: Path | None) -> list[str]:
    """Write the requested human reports; returns what was written, for the user."""
    from portability.report.files import write_atomic

    done = []
    if html is not None:
        from portability.report.html import render as render_html

        write_atomic(html, render_html(report, d))
        done.append(f"html: {html}")
    if markdown is not None:
        from portability.report.markdown import render as render_md

        write_atomic(markdown, render_md(report, d))
        done.append(f"markdown: {markdown}")
    return done


def record(report: Report, golden=None) -> tuple[int | None, str | None]:
    """(run id, None), or (None, why) when the history cannot be written: a check never fails for it. The
    run's kept outputs (``golden``) are stored beside it."""
    from portability.report.history import History, HistoryError

    try:
        with History() as h:
            return h.record(report, golden.to_bytes() if golden is not None else None), None
    except (HistoryError, OSError) as e:
        return None, str(e)
