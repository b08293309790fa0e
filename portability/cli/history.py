"""``portability history [MODEL]`` and ``portability diff A B``: past checks and what changed."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from portability.core.status import Status


def _model_key(model: str) -> tuple[str | None, str | None]:
    """(sha256 or a prefix of it, resolved path) naming a model: a model file matches by content or by
    path (a model with external data hashes its data files too), else the argument is a sha256 prefix."""
    from portability.core.errors import UsageError

    p = Path(model)
    if p.is_file():
        from portability.core.artifact import sha256_files

        return sha256_files([p.resolve()]), str(p.resolve())
    if len(model) >= 6 and all(c in "0123456789abcdef" for c in model.lower()):
        return model.lower(), None
    raise UsageError(f"'{model}' is neither a model file nor a sha256 (prefix of at least 6 hex digits)")


def history(
    model: Optional[str] = typer.Argument(None, help="Only the runs of this model (a file, or its sha256 or a prefix of it).", show_default=False),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=1, help="How many runs, most recent first (default 20; with --html 1000)."),
    json_out: bool = typer.Option(False, "--json", help="Print as JSON."),
    html_dir: Optional[Path] = typer.Option(None, "--html", help="Write a static, offline site of these runs to this folder: per model, plots of drift, accuracy, size and latency per target (and per version) across runs, linking to each run's report."),
) -> int:
    """List recorded checks: id, time, model, verdict and target counts
    (database: $PORTABILITY_DATA_DIR or ~/.local/share/portability/history.sqlite)."""
    import json
    from dataclasses import asdict

    from rich.console import Console
    from rich.table import Table

    from portability.core.errors import UsageError
    from portability.report.history import History, HistoryError, default_path

    if not default_path().is_file():
        runs = []
    else:
        try:
            with History() as h:
                runs = h.runs(*(_model_key(model) if model else (None, None)), limit=limit or (1000 if html_dir else 20))
                reports = [(r.id, h.report(r.id)) for r in runs] if html_dir else []
        except HistoryError as e:
            raise UsageError(str(e)) from None
    if html_dir is not None:
        from portability.report.site import write

        if not runs:
            raise UsageError(f"no recorded checks{' of ' + model if model else ''} in {default_path()}: nothing to write")
        pages = write(html_dir, reports)
        Console(stderr=True).print(f"history site: {pages[0]} ({len(reports)} runs, {len(pages) - 1} models)",
                                   soft_wrap=True, highlight=False)
        return 0
    if json_out:
        print(json.dumps([asdict(r) for r in runs], indent=2))
        return 0
    if not runs:
        Console(stderr=True).print(f"no recorded checks{' of ' + model if model else ''} in {default_path()}")
        return 0
    out = Console()
    if not out.is_terminal:
        out = Console(width=160)
    table = Table("id", "time", "model", "sha256", "verdict", Status.PASS.value, "failed", Status.SKIPPED.value, "environment")
    for r in runs:
        failed = sum(n for s, n in r.counts.items() if s not in (Status.PASS, Status.SKIPPED))
        table.add_row(str(r.id), r.created_at.replace("T", " ")[:19], Path(r.model_path).name, r.model_sha256[:12],
                      "[green]passed[/]" if r.passed else "[red]failed[/]", str(r.counts.get(Status.PASS, 0)), str(failed),
                      str(r.counts.get(Status.SKIPPED, 0)), r.env_key[:8])
    out.print(table)
    return 0


def diff(
    before: str = typer.Argument(..., help="The earlier run: a history run id, a JSON report or a --save-outputs file.", show_default=False),
    after: str = typer.Argument(..., help="The later run: a history run id, a JSON report or a --save-outputs file.", show_default=False),
    latency: bool = typer.Option(False, "--latency", help="Count a slower p50 latency as a regression (it is noisy: shown, not counted, by default)."),
    json_out: bool = typer.Option(False, "--json", help="Print the changes as JSON."),
    fail_on_regression: bool = typer.Option(False, "--fail-on-regression", help="Exit 1 when a gating target regressed."),
) -> int:
    """What changed from BEFORE to AFTER, per target and metric: status changes first, then outputs that
    moved (run ids and --save-outputs files keep them, JSON reports their digests), drift, accuracy, size
    and latency beyond noise."""
    import json
    from dataclasses import asdict

    from rich.console import Console

    from portability.report import baseline
    from portability.report.diff import Tolerances, diff as compute

    a, la = baseline.load(before)
    b, lb = baseline.load(after)
    d = compute(a, b, Tolerances(gate_latency=latency), labels=(la, lb),
                outputs=(baseline.outputs(before), baseline.outputs(after)))
    if json_out:
        print(json.dumps({"before": la, "after": lb, "notes": list(d.notes),
                          "changes": [asdict(c) for c in d.changes]}, indent=2, default=str))
    else:
        out = Console()
        out.print(f"[bold]{la}[/] → [bold]{lb}[/]  ({Path(str(b.model.get('path', ''))).name})", highlight=False)
        for n in d.notes:
            out.print(f"[yellow]note:[/] {n}", highlight=False, soft_wrap=True)
        if not d.changes:
            out.print("no change beyond noise")
        for c in d.changes:
            tag = "[red]regression[/]" if c.regression else "change"
            xc = "" if c.gating else " (cross-check)"
            out.print(f"  {tag} [bold]{c.target}[/]{xc} {c.metric}: {c.text}", highlight=False, soft_wrap=True)
        if d.regressions:
            out.print(f"{len(d.regressions)} regression(s) in: {', '.join(dict.fromkeys(c.target for c in d.regressions))}")
    return 1 if fail_on_regression and d.gating_regressions else 0
