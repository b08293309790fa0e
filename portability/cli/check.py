"""``portability check MODEL``: the main command."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer

from portability.cli.options import (REPORTS, AllowSkippedOpt, ConfigOpt, HtmlOpt, JsonOpt, JunitOpt, MarkdownOpt,
                                     ProfileOpt, QuietOpt, takes_settings)
from portability.core.status import Status


class _Progress:
    def __init__(self, console, quiet: bool):
        self.console, self.quiet = console, quiet
        self.status = None
        self.running: dict[str, str] = {}

    def _refresh(self) -> None:
        if self.status is not None:
            self.status.update(", ".join(f"{k}: {v}…" for k, v in self.running.items()) or "…")

    def note(self, text: str) -> None:
        """A step before the targets start (building a version's environment): said even with --quiet."""
        self.console.print(f"  {text}", highlight=False)
        if self.status is not None:
            self.status.update(text)

    def target_started(self, target) -> None:
        self.running[target.id] = "starting"
        self._refresh()

    def target_phase(self, target, phase) -> None:
        from portability.core.protocol import Phase

        self.running[target.id] = Phase(phase).label
        self._refresh()

    def target_done(self, r) -> None:
        from portability.report.table import STYLE

        self.running.pop(r.id, None)
        self._refresh()
        if not self.quiet:
            took = f"{r.duration_s:.1f} s" if r.duration_s is not None else ""
            self.console.print(f"  [{STYLE.get(r.status, '')}]{r.status:<13}[/] {r.id:<24} {took}", highlight=False)


@dataclass(frozen=True)
class _Asked:
    """What the command line asked besides the model and its settings: the files, the baseline, the history."""
    json_path: Optional[Path] = None
    junit_path: Optional[Path] = None
    html_path: Optional[Path] = None
    markdown_path: Optional[Path] = None
    baseline: Optional[str] = None
    save_outputs: Optional[Path] = None
    baseline_latency: bool = False
    max_size_growth: Optional[float] = None
    no_history: bool = False
    config: Optional[Path] = None
    profile: Optional[str] = None
    quiet: bool = False
    allow_skipped: bool = False


@takes_settings("check")
def check(
    model: Path = typer.Argument(..., help="The model: an ONNX file (external data beside it is supported), a Keras 3 .keras file, a SavedModel folder, a .tflite file, a TF.js model.json (or its folder), a torch.export .pt2 program, or an MXNet NAME-symbol.json (NAME-0000.params beside it).", show_default=False),
    json_path: JsonOpt = None,
    junit_path: JunitOpt = None,
    html_path: HtmlOpt = None,
    markdown_path: MarkdownOpt = None,
    baseline: Optional[str] = typer.Option(None, "--baseline", rich_help_panel="Comparing with a baseline", help="Compare with a history run id, a JSON report or a --save-outputs file: exit 1 when a gating target regressed (status, outputs, drift, accuracy, size). Outputs are compared with the baseline's own outputs on the same inputs (a run id or an outputs file keeps them; a JSON report carries their digests and sampled elements)."),
    save_outputs: Optional[Path] = typer.Option(None, "--save-outputs", rich_help_panel="Comparing with a baseline", help="Write every target's outputs (whole while small, else a seeded sample with statistics and digests) and the report to this .npz, for --baseline FILE elsewhere."),
    baseline_latency: bool = typer.Option(False, "--baseline-latency", rich_help_panel="Comparing with a baseline", help="With --baseline, a p50 latency slower than the regression tolerance (default 1.5x) is a regression too."),
    max_size_growth: Optional[float] = typer.Option(None, "--max-size-growth", min=0, rich_help_panel="Comparing with a baseline", help="With --baseline, the largest allowed artifact growth as a fraction (default 0.10)."),
    no_history: bool = typer.Option(False, "--no-history", rich_help_panel=REPORTS, help="Do not record this check in the history database."),
    config: ConfigOpt = None,
    profile: ProfileOpt = None,
    quiet: QuietOpt = False,
    allow_skipped: AllowSkippedOpt = False,
    **settings: Any,
) -> int:
    """Convert MODEL for each target, run it there, compare with the source's own runtime, and report.

    Exit 0 when every gating target passed (and every target named by its id ran), 1 when one failed (or a
    named one was skipped, unless --allow-skipped), 2 on a usage error or bad model/input."""
    asked = _Asked(json_path=json_path, junit_path=junit_path, html_path=html_path, markdown_path=markdown_path,
                   baseline=baseline, save_outputs=save_outputs, baseline_latency=baseline_latency,
                   max_size_growth=max_size_growth, no_history=no_history, config=config, profile=profile, quiet=quiet,
                   allow_skipped=allow_skipped)
    return _check(model, asked, settings)


def _settings(config: Optional[Path], profile: Optional[str]) -> dict:
    """The settings file's table (with ``--profile``'s settings over it)."""
    from portability.settings.config import find_config, load_config
    from portability.core.errors import UsageError

    if config and not config.is_file():
        raise UsageError(f"config file not found: {config}")
    return load_config(config or find_config(Path.cwd()), profile)


def _check(model: Path, f: _Asked, flags: dict[str, Any]) -> int:
    from rich.console import Console

    from portability.cli import outputs
    from portability.sources import load_source_isolated
    from portability.settings.config import COMPARE
    from portability.settings.options import resolve
    from portability.engine.grid import check as run_check  # one check, or one per --shape-grid shape
    from portability.workers import prestart

    err = Console(stderr=True)
    cfg = _settings(f.config, f.profile)
    opts = resolve({k: v for k, v in cfg.items() if k not in COMPARE}, flags)
    outputs.require_writable(f.json_path, f.junit_path, f.html_path, f.markdown_path, f.save_outputs)
    outputs.require_plotting(f.html_path)
    tol = outputs.tolerances(cfg, f.baseline_latency, f.max_size_growth)
    base = outputs.load_baseline(f.baseline if f.baseline is not None else cfg.get("baseline"))
    _say_sandbox(opts.sandbox, err)
    # the workers' fork server starts (or is leased from the resident session) beside the model's reading
    prestart(resident=opts.resident == "auto")
    info = load_source_isolated(model, sandbox=opts.sandbox, shapes=opts.shapes)
    outputs.require_comparable(base, info.to_dict())
    if not f.quiet:
        shape_s = ", ".join(f"{i.name} {i.dtype}[{','.join('?' if d is None else str(d) for d in i.shape)}]" for i in info.inputs)
        kind = f"opset {info.opset}" if info.format == "onnx" else f"{info.format} ({info.framework})"
        err.print(f"[bold]{model}[/]  {kind}, {info.size_bytes / 1024:.1f} KB, {info.producer}; inputs: {shape_s}", highlight=False)
    progress = _Progress(err, f.quiet)
    kept: dict = {}
    with err.status("starting…") as status:
        progress.status = status
        report = run_check(model, opts, progress, model=info, kept=kept)
        if opts.localize:
            from portability.explain.localize import attach

            attach(report, model, opts, say=lambda s: status.update(s))
        if opts.fix:
            from portability.explain import fix

            fix.attach(report, model, opts, say=lambda s: status.update(f"fix: {s}…"))
    from portability.engine.verdict import require_named, unmet
    from portability.report.golden import Golden

    missing = [] if f.allow_skipped else unmet(report, opts.targets)
    report = require_named(report, opts.targets, f.allow_skipped)  # explicit means required: files and exit agree
    golden = Golden.of(kept["inputs"], kept["outputs"]) if kept else None
    return _report(f, report, base, tol, err, golden, missing)


def _say_sandbox(mode: str, err) -> None:
    """Where the OS sandbox cannot be set up, or a debug switch turns part of it off: an error with
    ``--sandbox require``, else said once (a switch as a warning that names it)."""
    from portability.core.errors import UsageError
    from portability.core.sandbox import status, switched_off

    off = switched_off(mode)
    if mode == "require" and off:
        raise UsageError(f"--sandbox require: {off} (debug switches of the sandbox's own tests: unset them)")
    if mode == "off":
        if off:
            err.print(f"[yellow]warning:[/] {off}: models are loaded neither vetted nor confined", highlight=False)
        return
    ok, why = status()
    if not ok and mode == "require":
        raise UsageError(f"--sandbox require: {why}")
    if not ok:
        err.print(f"[yellow]{'warning' if off else 'note'}:[/] not sandboxed: {why}", highlight=False)
    elif off:
        err.print(f"[yellow]warning:[/] {off}: models are confined by the OS sandbox alone", highlight=False)


def _report(f: _Asked, report, base, tol, err, golden=None, missing=()) -> int:
    """Print the table and notes, write the files, record the history, compare with the baseline; the exit code."""
    from rich.console import Console

    from portability.cli import outputs
    from portability.report.files import write_json, write_junit
    from portability.report.calibration import is_warning
    from portability.report.table import explanations, render

    for note in report.notes:
        err.print(f"[yellow]{'warning' if is_warning(note) else 'note'}:[/] {note}", highlight=False)
    out = Console()
    if not out.is_terminal:  # a log or a pipe: do not squeeze the table into 80 columns
        out = Console(width=160)
    out.print(render(report))
    from portability.report.table import versions as version_tables

    for t in version_tables(report):
        out.print(t)
    from rich.markup import escape

    for tid, why in explanations(report):  # escaped: a hint's 'portability[extra]' is not markup
        out.print(f"  [bold]{tid}[/]: {escape(why)}", highlight=False, soft_wrap=True)
    from portability.report import localized

    for tid, doc in localized.found(report):
        out.print(f"  [bold]{tid}[/] localized: {localized.line(doc)}", highlight=False, soft_wrap=True)
    for tid, doc in localized.fixes(report):
        out.print(f"  [bold]{tid}[/] fix: {localized.fix_line(doc)}", highlight=False, soft_wrap=True)
    if f.json_path:
        write_json(report, f.json_path)
        err.print(f"report: {f.json_path}")
    if f.junit_path:
        write_junit(report, f.junit_path)
    if f.save_outputs and golden is not None:
        import json

        from portability.report.files import to_json

        golden.save(f.save_outputs, json.loads(to_json(report)))
        err.print(f"outputs: {f.save_outputs}")
    changes = outputs.compare(base, report, tol, golden)
    for line in outputs.write_files(report, changes, f.html_path, f.markdown_path):
        err.print(line, highlight=False)
    run_id, why = (None, None) if f.no_history else outputs.record(report, golden)
    if run_id is not None or why:
        err.print(f"history: run {run_id}" if run_id is not None else f"[yellow]history not recorded:[/] {why}", highlight=False)
    for line in outputs.change_lines(changes):
        out.print(line, highlight=False, soft_wrap=True)
    return _verdict(report, changes, err, missing)


def _skipped_line(t) -> str:
    """A named target that was skipped: its id, why, and the command that fixes it."""
    return f"{t.id} skipped ({t.error or 'not available here'}" + (f"; fix: {t.hint}" if t.hint else "") + ")"


def _verdict(report, changes, err, missing=()) -> int:
    """The closing line and the exit code. ``missing``: the targets named by their id that were skipped
    (``engine.verdict.unmet``), each failing the run."""
    from rich.markup import escape

    regressed = [] if changes is None else list(changes.gating_regressions)
    gating_failed = [t.id for t in report.targets if t.gating and t.failed]
    ref = report.targets[0]
    skipped = [t.id for t in report.targets if t.status == Status.SKIPPED]
    if ref.status not in (Status.PASS, Status.FALLBACK):
        err.print(f"[red]the reference {ref.id} did not run ({ref.status}): nothing to compare with[/]"
                  + (f"; {len(skipped)} other targets not run" if skipped else ""))
    elif skipped and not missing:
        err.print(f"[yellow]{len(skipped)} of {len(report.targets)} targets skipped[/] (not available here: see each reason)")
    if report.passed and not regressed and not missing:
        err.print("[green]passed[/]: every gating target is within its thresholds"
                  + (f" and nothing regressed since {changes.before}" if changes is not None else ""), soft_wrap=True)
        return 0
    named = [_skipped_line(t) for t in missing]
    if named:
        named[-1] += " — named with --targets, so required (--allow-skipped lets the run pass without them)"
    failures = ", ".join(gating_failed + [f"{c.target} regressed ({c.metric})" for c in regressed])
    err.print("[red]failed[/]: " + escape("; ".join(filter(None, [failures, *named]))), soft_wrap=True, highlight=False)
    return 1
