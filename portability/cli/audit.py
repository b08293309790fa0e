"""``portability audit DIR|MANIFEST``: many models, one scorecard (``engine/audit.py``)."""
from __future__ import annotations

from pathlib import Path

import typer

from portability.cli.options import (DatasetOpt, InputsOpt, JobsOpt, JsonOpt, MarkdownOpt, RunsOpt, SamplesOpt,
                                     SandboxOpt, ShapeOpt, TargetsOpt)


def audit(
    spec: Path = typer.Argument(..., help="A folder of models (every ONNX, .keras, .pt2, .tflite file and SavedModel or TF.js folder in it) or a TOML manifest ([defaults] and [[model]] path = ..., each with its own check settings).", show_default=False),
    targets: TargetsOpt = None,
    json_path: JsonOpt = None,
    markdown_path: MarkdownOpt = None,
    rerun: bool = typer.Option(False, "--rerun", help="Check every model again, also those an earlier run of this audit finished."),
    inputs: InputsOpt = None,
    dataset: DatasetOpt = None,
    shape: ShapeOpt = None,
    samples: SamplesOpt = None,
    runs: RunsOpt = None,
    jobs: JobsOpt = None,
    sandbox: SandboxOpt = None,
) -> int:
    """Check every model of a folder or manifest as `check` would, with the browsers, the emulator and the
    warm workers started once, each model's result kept as it finishes (a rerun resumes), and one scorecard:
    per target pass rate and failures, failures by op and by message, a row per model.

    Exit 0 when every gating target of every model passed, 1 when one failed, 2 on a usage error."""
    import json

    from rich.console import Console
    from rich.table import Table

    from portability.engine.audit import run
    from portability.report import scorecard
    from portability.report.files import write_atomic

    err = Console(stderr=True)
    flags = {"targets": targets, "inputs": inputs, "dataset": dataset, "shapes": shape or None, "samples": samples,
             "runs": runs, "jobs": jobs, "sandbox": sandbox}

    def said(i: int, n: int, item, entry) -> None:
        if entry is None:
            err.print(f"[{i + 1}/{n}] {item.path.name}: checking…", highlight=False)
        else:
            how = " (finished earlier)" if entry.get("resumed") else ""
            style = "green" if entry["status"] == "passed" else "red"
            err.print(f"[{i + 1}/{n}] {item.path.name}: [{style}]{entry['status']}[/]{how}"
                      + (f": {entry['error']}" if entry.get("error") else ""), highlight=False, soft_wrap=True)

    entries = run(spec, flags, rerun=rerun, on_model=said)
    card = scorecard.build(entries)
    out = Console() if Console().is_terminal else Console(width=160)
    table = Table("target", "pass rate", "passed", "failures", "median size", "median p50 ms",
                  title=f"audit: {card['models_passed']} of {card['models']} models passed", title_justify="left")
    for tid, t in card["targets"].items():
        fails = ", ".join(f"{s} {n}" for s, n in t["by_status"].items() if s not in ("pass", "skipped")) or "–"
        table.add_row(tid, "–" if t["pass_rate"] is None else f"{t['pass_rate']:.0%}", f"{t['pass']}/{t['models']}",
                      fails, "–" if not t["median_size_bytes"] else f"{t['median_size_bytes'] / 1024:.1f} KB",
                      "–" if t["median_p50_ms"] is None else f"{t['median_p50_ms']:.3g}")
    out.print(table)
    for f in card["failures_by_op"][:10]:
        out.print(f"  {f['target']}: op {f['op']} fails in {f['models']} model(s)", highlight=False)
    if json_path:
        write_atomic(json_path, json.dumps({"models": entries, "scorecard": card}, indent=1, default=str) + "\n")
        err.print(f"audit: {json_path}")
    if markdown_path:
        write_atomic(markdown_path, scorecard.markdown(card))
    failed = [e for e in entries if e["status"] != "passed"]
    return 1 if failed else 0
