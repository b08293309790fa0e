"""``portability check MODEL``: the main command."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def _floats(s: str, what: str) -> tuple[float, float]:
    from portability.core.errors import UsageError

    try:
        lo, hi = (float(x) for x in s.split(","))
    except ValueError:
        raise UsageError(f"{what} must look like LOW,HIGH (e.g. 0,1), got '{s}'") from None
    if not lo < hi:
        raise UsageError(f"{what}: LOW must be below HIGH, got '{s}'")
    return lo, hi


class _Progress:
    def __init__(self, console, quiet: bool):
        self.console, self.quiet = console, quiet
        self.status = None
        self.running: dict[str, str] = {}

    def _refresh(self) -> None:
        if self.status is not None:
            self.status.update(", ".join(f"{k}: {v}…" for k, v in self.running.items()) or "…")

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
    model: Path = typer.Argument(..., help="The ONNX model file (external data beside it is supported).", show_default=False),
    targets: Optional[str] = typer.Option(None, "--targets", "-t", help="Comma-separated platforms (server, web, mobile, all) or exact target ids (web/ort-wasm). Default: server. The reference server/ort-cpu always runs."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the schema-v1 JSON report here."),
    junit_path: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report here (one test case per target), for CI."),
    html_path: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML report with plots here (opens offline)."),
    markdown_path: Optional[Path] = typer.Option(None, "--markdown", help="Write a Markdown summary here (for a CI job summary or a PR comment)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Compare with a history run id or a JSON report: exit 1 when a gating target regressed (status, drift, accuracy, size)."),
    baseline_latency: bool = typer.Option(False, "--baseline-latency", help="With --baseline, a p50 latency slower than the regression tolerance (default 1.5x) is a regression too."),
    max_size_growth: Optional[float] = typer.Option(None, "--max-size-growth", min=0, help="With --baseline, the largest allowed artifact growth as a fraction (default 0.10)."),
    no_history: bool = typer.Option(False, "--no-history", help="Do not record this check in the history database."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Apply the settings of [tool.portability.profiles.NAME] over the base settings."),
    inputs: Optional[Path] = typer.Option(None, "--inputs", help=".npz with one array per model input (one batch, or a stack of batches)."),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help=".npz with 'x' (or one array per input) and integer labels 'y': adds task accuracy."),
    shape: Optional[List[str]] = typer.Option(None, "--shape", help="Fix dynamic dims: NAME=1x3x224x224 (repeatable). Default: leading dim 1, others 32, with a warning."),
    samples: Optional[int] = typer.Option(None, "--samples", min=1, help="Synthesized batches (default 8), or the most dataset samples to use (default all)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of synthesized inputs (default 0)."),
    input_range: str = typer.Option("0,1", "--input-range", help="LOW,HIGH of synthesized float inputs."),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, help="Untimed runs before timing (default 10)."),
    runs: Optional[int] = typer.Option(None, "--runs", min=0, help="Timed runs for latency percentiles (default 50; 0 skips timing)."),
    time_budget: Optional[float] = typer.Option(None, "--time-budget", min=0, help="Seconds a target's latency sampling may take (default 20): a slow target gets fewer runs (at least 5), and the report says how many."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=1, help="Seconds a target may take from loading to its last timed run (default 300)."),
    convert_timeout: Optional[float] = typer.Option(None, "--convert-timeout", min=1, help="Seconds a target's conversions may take (default 900)."),
    memory_limit_mb: Optional[float] = typer.Option(None, "--memory-limit-mb", help="Kill a target whose processes use more memory (default: 80% of RAM)."),
    max_abs: Optional[float] = typer.Option(None, "--max-abs", help="Threshold: largest absolute output difference (default 1e-4)."),
    cosine: Optional[float] = typer.Option(None, "--cosine", help="Threshold: lowest cosine similarity per output (default 0.9999)."),
    min_top1: Optional[float] = typer.Option(None, "--min-top1", help="Threshold: lowest top-1 agreement (default 1.0)."),
    max_accuracy_drop: Optional[float] = typer.Option(None, "--max-accuracy-drop", help="Threshold: largest accuracy fall with --dataset (default 0.01)."),
    gate: Optional[List[str]] = typer.Option(None, "--gate", help="Make targets/platforms gating (ID) or cross-checks (-ID); comma-separated, repeatable."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Convert afresh and keep nothing in the artifact cache."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Artifact cache (default $PORTABILITY_CACHE_DIR or ~/.cache/portability)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Targets run at once after the reference (default 1: clean latencies)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (default: ./portability.toml or [tool.portability] in ./pyproject.toml)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the table (and errors)."),
) -> int:
    """Convert MODEL for each target, run it there, compare with server/ort-cpu, and report.

    Exit 0 when every gating target passed, 1 when one failed, 2 on a usage error or bad model/input."""

    import os

    import psutil
    from rich.console import Console

    from portability.cli import outputs
    from portability.core.config import find_config, load_config
    from portability.core.errors import UsageError
    from portability.core.model import load_model_isolated
    from portability.engine.pipeline import CheckOptions, check as run_check
    from portability.engine.runner import Limits
    from portability.report.files import write_json, write_junit
    from portability.report.table import explanations, render

    err = Console(stderr=True)
    cfg_path = config if config else find_config(Path.cwd())
    if config and not config.is_file():
        raise UsageError(f"config file not found: {config}")
    cfg = load_config(cfg_path, profile)
    pick = lambda flag, key, default: flag if flag is not None else cfg.get(key, default)  # noqa: E731

    user_t = {k: v for k, v in cfg.get("thresholds", {}).items() if not isinstance(v, dict)}
    per_target = {k: v for k, v in cfg.get("thresholds", {}).items() if isinstance(v, dict)}
    for k, v in (("max_abs", max_abs), ("cosine", cosine), ("top1_agreement", min_top1), ("accuracy_drop", max_accuracy_drop)):
        if v is not None:
            user_t[k] = v
            for d in per_target.values():
                d.pop(k, None)
    gates = [g.strip() for item in (gate or cfg.get("gate", [])) for g in item.split(",") if g.strip()]
    mem = pick(memory_limit_mb, "memory_limit_mb", psutil.virtual_memory().total / 2**20 * 0.8)
    if mem is not None and mem <= 0:
        raise UsageError("--memory-limit-mb must be positive")
    for out_path in (json_path, junit_path):
        if out_path is not None and not (out_path.parent.is_dir() and os.access(out_path.parent, os.W_OK)):
            raise UsageError(f"cannot write a report to {out_path}: its folder does not exist or is not writable")
    outputs.require_writable(html_path, markdown_path)
    outputs.require_plotting(html_path)
    tol = outputs.tolerances(cfg, baseline_latency, max_size_growth)
    base = outputs.load_baseline(pick(baseline, "baseline", None))
    opts = CheckOptions(
        targets=pick(targets, "targets", "server"),
        inputs=pick(inputs, "inputs", None), dataset=pick(dataset, "dataset", None), shapes=list(shape or cfg.get("shapes", [])),
        samples=pick(samples, "samples", None), seed=pick(seed, "seed", 0),
        value_range=_floats(input_range, "--input-range"),
        warmup=pick(warmup, "warmup", 10), runs=pick(runs, "runs", 50),
        time_budget_s=float(pick(time_budget, "time_budget", 20.0)),
        limits=Limits(convert_timeout_s=float(pick(convert_timeout, "convert_timeout", 900)),
                      run_timeout_s=float(pick(timeout, "timeout", 300)), memory_mb=float(mem) if mem else None),
        thresholds=user_t, target_thresholds=per_target, gate=gates,
        timeout_explicit=timeout is not None or "timeout" in cfg,
        use_cache=not no_cache, cache_dir=cache_dir, jobs=pick(jobs, "jobs", 1),
    )
    info = load_model_isolated(model)
    outputs.require_comparable(base, info.to_dict())
    if not quiet:
        shape_s = ", ".join(f"{i.name} {i.dtype}[{','.join('?' if d is None else str(d) for d in i.shape)}]" for i in info.inputs)
        err.print(f"[bold]{model}[/]  opset {info.opset}, {info.size_bytes / 1024:.1f} KB, {info.producer}; inputs: {shape_s}", highlight=False)
    progress = _Progress(err, quiet)
    with err.status("starting…") as status:
        progress.status = status
        report = run_check(model, opts, progress, model=info)
    for note in report.notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    out = Console()
    if not out.is_terminal:  # a log or a pipe: do not squeeze the table into 80 columns
        out = Console(width=160)
    out.print(render(report))
    for tid, why in explanations(report):
        out.print(f"  [bold]{tid}[/]: {why}", highlight=False, soft_wrap=True)
    if json_path:
        write_json(report, json_path)
        err.print(f"report: {json_path}")
    if junit_path:
        write_junit(report, junit_path)
    changes = outputs.compare(base, report, tol)
    for line in outputs.write_files(report, changes, html_path, markdown_path):
        err.print(line, highlight=False)
    run_id, why = (None, None) if no_history else outputs.record(report)
    if run_id is not None or why:
        err.print(f"history: run {run_id}" if run_id is not None else f"[yellow]history not recorded:[/] {why}", highlight=False)
    regressed = [] if changes is None else list(changes.gating_regressions)
    for line in outputs.change_lines(changes):
        out.print(line, highlight=False, soft_wrap=True)
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
