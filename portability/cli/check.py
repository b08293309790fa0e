"""``portability check MODEL``: the main command."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from portability.cli.options import (CacheDirOpt, ConfigOpt, ConvertTimeoutOpt, CosineOpt, DatasetOpt, GateOpt, HtmlOpt,
                                     InputRangeOpt, InputsOpt, JobsOpt, JsonOpt, JunitOpt, MarkdownOpt, MaxAbsOpt,
                                     MaxAccuracyDropOpt, MemoryOpt, MinTop1Opt, NoCacheOpt, ProfileOpt, QuietOpt, RobustnessOpt,
                                     RobustnessSamplesOpt, RunsOpt, SandboxOpt, VersionsOpt,
                                     SamplesOpt, SeedOpt, ShapeOpt, TargetsOpt, TimeBudgetOpt, TimeoutOpt, ViaOpt, WarmupOpt)


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


def check(
    model: Path = typer.Argument(..., help="The model: an ONNX file (external data beside it is supported), a Keras 3 .keras file, a SavedModel folder, a .tflite file, a TF.js model.json (or its folder), or a torch.export .pt2 program.", show_default=False),
    targets: TargetsOpt = None,
    via: ViaOpt = None,
    json_path: JsonOpt = None,
    junit_path: JunitOpt = None,
    html_path: HtmlOpt = None,
    markdown_path: MarkdownOpt = None,
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Compare with a history run id, a JSON report or a --save-outputs file: exit 1 when a gating target regressed (status, outputs, drift, accuracy, size). Outputs are compared with the baseline's own outputs on the same inputs (a run id or an outputs file keeps them)."),
    save_outputs: Optional[Path] = typer.Option(None, "--save-outputs", help="Write every target's outputs (whole while small, else a seeded sample with statistics and digests) and the report to this .npz, for --baseline FILE elsewhere."),
    baseline_latency: bool = typer.Option(False, "--baseline-latency", help="With --baseline, a p50 latency slower than the regression tolerance (default 1.5x) is a regression too."),
    max_size_growth: Optional[float] = typer.Option(None, "--max-size-growth", min=0, help="With --baseline, the largest allowed artifact growth as a fraction (default 0.10)."),
    no_history: bool = typer.Option(False, "--no-history", help="Do not record this check in the history database."),
    profile: ProfileOpt = None,
    inputs: InputsOpt = None,
    dataset: DatasetOpt = None,
    shape: ShapeOpt = None,
    samples: SamplesOpt = None,
    seed: SeedOpt = None,
    input_range: InputRangeOpt = None,
    warmup: WarmupOpt = None,
    runs: RunsOpt = None,
    time_budget: TimeBudgetOpt = None,
    timeout: TimeoutOpt = None,
    convert_timeout: ConvertTimeoutOpt = None,
    memory_limit_mb: MemoryOpt = None,
    max_abs: MaxAbsOpt = None,
    cosine: CosineOpt = None,
    min_top1: MinTop1Opt = None,
    max_accuracy_drop: MaxAccuracyDropOpt = None,
    robustness: RobustnessOpt = None,
    robustness_samples: RobustnessSamplesOpt = None,
    gate: GateOpt = None,
    no_cache: NoCacheOpt = False,
    cache_dir: CacheDirOpt = None,
    jobs: JobsOpt = None,
    sandbox: SandboxOpt = None,
    versions: VersionsOpt = None,
    config: ConfigOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Convert MODEL for each target, run it there, compare with the source's own runtime, and report.

    Exit 0 when every gating target passed, 1 when one failed, 2 on a usage error or bad model/input."""
    return _check(dict(locals()))


#: flags that are not check settings (outputs, comparison, settings file, display)
_NOT_SETTINGS = ("model", "json_path", "junit_path", "html_path", "markdown_path", "baseline", "save_outputs", "baseline_latency",
                 "max_size_growth", "no_history", "profile", "config", "quiet", "shape", "no_cache")


def _settings(f: dict[str, Any]) -> tuple[dict, dict]:
    """(the settings file's table, the flags as a settings layer)."""
    from portability.engine.config import find_config, load_config
    from portability.core.errors import UsageError

    if f["config"] and not f["config"].is_file():
        raise UsageError(f"config file not found: {f['config']}")
    cfg = load_config(f["config"] or find_config(Path.cwd()), f["profile"])
    flags = {k: v for k, v in f.items() if k not in _NOT_SETTINGS}
    flags.update(shapes=f["shape"] or None, use_cache=False if f["no_cache"] else None)
    return cfg, flags


def _check(f: dict[str, Any]) -> int:
    from rich.console import Console

    from portability.cli import outputs
    from portability.sources import load_source_isolated
    from portability.engine.options import DEFAULTS, resolve
    from portability.engine.pipeline import check as run_check

    err = Console(stderr=True)
    cfg, flags = _settings(f)
    opts = resolve({k: v for k, v in cfg.items() if k in DEFAULTS}, flags)
    outputs.require_writable(f["json_path"], f["junit_path"], f["html_path"], f["markdown_path"], f["save_outputs"])
    outputs.require_plotting(f["html_path"])
    tol = outputs.tolerances(cfg, f["baseline_latency"], f["max_size_growth"])
    base = outputs.load_baseline(f["baseline"] if f["baseline"] is not None else cfg.get("baseline"))
    _say_sandbox(opts.sandbox, err)
    info = load_source_isolated(f["model"], sandbox=opts.sandbox, shapes=opts.shapes)
    outputs.require_comparable(base, info.to_dict())
    if not f["quiet"]:
        shape_s = ", ".join(f"{i.name} {i.dtype}[{','.join('?' if d is None else str(d) for d in i.shape)}]" for i in info.inputs)
        kind = f"opset {info.opset}" if info.format == "onnx" else f"{info.format} ({info.framework})"
        err.print(f"[bold]{f['model']}[/]  {kind}, {info.size_bytes / 1024:.1f} KB, {info.producer}; inputs: {shape_s}", highlight=False)
    progress = _Progress(err, f["quiet"])
    kept: dict = {}
    with err.status("starting…") as status:
        progress.status = status
        report = run_check(f["model"], opts, progress, model=info, kept=kept)
    from portability.report.golden import Golden

    golden = Golden.of(kept["inputs"], kept["outputs"]) if kept else None
    return _report(f, report, base, tol, err, golden)


def _say_sandbox(mode: str, err) -> None:
    """Where the OS sandbox cannot be set up: an error with ``--sandbox require``, else said once."""
    from portability.core.errors import UsageError
    from portability.core.sandbox import status

    if mode == "off":
        return
    ok, why = status()
    if not ok and mode == "require":
        raise UsageError(f"--sandbox require: {why}")
    if not ok:
        err.print(f"[yellow]note:[/] not sandboxed: {why}", highlight=False)


def _report(f: dict[str, Any], report, base, tol, err, golden=None) -> int:
    """Print the table and notes, write the files, record the history, compare with the baseline; the exit code."""
    from rich.console import Console

    from portability.cli import outputs
    from portability.report.files import write_json, write_junit
    from portability.report.table import explanations, render

    for note in report.notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    out = Console()
    if not out.is_terminal:  # a log or a pipe: do not squeeze the table into 80 columns
        out = Console(width=160)
    out.print(render(report))
    from portability.report.table import versions as version_tables

    for t in version_tables(report):
        out.print(t)
    for tid, why in explanations(report):
        out.print(f"  [bold]{tid}[/]: {why}", highlight=False, soft_wrap=True)
    if f["json_path"]:
        write_json(report, f["json_path"])
        err.print(f"report: {f['json_path']}")
    if f["junit_path"]:
        write_junit(report, f["junit_path"])
    if f["save_outputs"] and golden is not None:
        import json

        from portability.report.files import to_json

        golden.save(f["save_outputs"], json.loads(to_json(report)))
        err.print(f"outputs: {f['save_outputs']}")
    changes = outputs.compare(base, report, tol, golden)
    for line in outputs.write_files(report, changes, f["html_path"], f["markdown_path"]):
        err.print(line, highlight=False)
    run_id, why = (None, None) if f["no_history"] else outputs.record(report, golden)
    if run_id is not None or why:
        err.print(f"history: run {run_id}" if run_id is not None else f"[yellow]history not recorded:[/] {why}", highlight=False)
    for line in outputs.change_lines(changes):
        out.print(line, highlight=False, soft_wrap=True)
    return _verdict(report, changes, err)


def _verdict(report, changes, err) -> int:
    regressed = [] if changes is None else list(changes.gating_regressions)
    gating_failed = [t.id for t in report.targets if t.gating and t.failed]
    ref = report.targets[0]
    skipped = [t.id for t in report.targets if t.status == "skipped"]
    if ref.status != "pass":
        err.print(f"[red]the reference {ref.id} did not run ({ref.status}): nothing to compare with[/]"
                  + (f"; {len(skipped)} other targets not run" if skipped else ""))
    elif skipped:
        err.print(f"[yellow]{len(skipped)} of {len(report.targets)} targets skipped[/] (not available here: see each reason)")
    if report.passed and not regressed:
        err.print("[green]passed[/]: every gating target is within its thresholds"
                  + (f" and nothing regressed since {changes.before}" if changes is not None else ""), soft_wrap=True)
        return 0
    err.print(f"[red]failed[/]: {', '.join(gating_failed + [f'{c.target} regressed ({c.metric})' for c in regressed])}",
              soft_wrap=True, highlight=False)
    return 1
