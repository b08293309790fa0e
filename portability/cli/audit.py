"""``portability audit DIR|MANIFEST``: many models, one scorecard (``audit/run.py``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from portability.cli.options import JsonOpt, MarkdownOpt, takes_settings


@takes_settings("audit")
def audit(
    spec: Optional[Path] = typer.Argument(None, help="A folder of models (every model a source claims in it: ONNX, .keras, .pt2, .tflite files, SavedModel or TF.js folders, MXNet checkpoints NAME-symbol.json) or a TOML manifest (\\[defaults] and \\[\\[model]] path = ..., each with its own check settings). Not with --onnx-conformance.", show_default=False),
    json_path: JsonOpt = None,
    markdown_path: MarkdownOpt = None,
    html_path: Optional[Path] = typer.Option(None, "--html", help="Write the scorecard as an HTML page here, with each model's own full report beside it (FILE-models/) and linked from its row."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="An earlier audit's --json: show what got worse, what got fixed and how latency moved (bucketed by factor); exit 1 when something got worse."),
    onnx_conformance: bool = typer.Option(False, "--onnx-conformance", help="Audit ONNX's own node test cases (built from the installed onnx package, no download): each case's expected outputs are a second reference beside the reference runtime; an ops x targets table. State in ./.portability-audit."),
    ops: Optional[str] = typer.Option(None, "--ops", help="With --onnx-conformance: only these op types (comma-separated, e.g. Conv,Resize)."),
    cases: str = typer.Option("one", "--cases", help="With --onnx-conformance: 'one' case per op type, or 'all' of them."),
    executor: str = typer.Option("local", "--executor", help="local: this process, one model after another; ray: the models spread over Ray actors (--workers), each with its own browsers, emulator and workers."),
    address: Optional[str] = typer.Option(None, "--address", help="With --executor ray: the cluster to join (HOST:PORT, ray://..., auto). Default: a local Ray instance for this audit. Models must be readable at the same paths on every node."),
    workers: int = typer.Option(1, "--workers", min=1, help="With --executor ray: how many models are checked at once (one Ray actor each)."),
    rerun: bool = typer.Option(False, "--rerun", help="Check every model again, also those an earlier run of this audit finished."),
    **flags: Any,
) -> int:
    """Check every model of a folder or manifest as `check` would, with the browsers, the emulator and the
    warm workers started once, each model's result kept as it finishes (a rerun resumes), and one scorecard:
    per target pass rate and failures, failures by op and by message, a row per model.

    Exit 0 when every gating target of every model passed (and, with --baseline, nothing got worse),
    1 when one failed, 2 on a usage error."""
    from rich.console import Console

    from portability.core.errors import UsageError
    from portability.audit.run import run
    from portability.report import scorecard

    err = Console(stderr=True)
    if executor not in ("local", "ray"):
        raise UsageError(f"--executor must be local or ray, got '{executor}'")
    if address and executor != "ray":
        raise UsageError("--address goes with --executor ray")
    old = _baseline(baseline) if baseline else None
    corpus = _corpus(err, spec, onnx_conformance, ops, cases)

    def said(i: int, n: int, item, entry) -> None:
        if entry is None:
            err.print(f"[{i + 1}/{n}] {item.label()}: checking…", highlight=False)
        else:
            how = " (finished earlier)" if entry.resumed else ""
            style = "green" if entry.passed else "red"
            err.print(f"[{i + 1}/{n}] {item.label()}: [{style}]{entry.status}[/]{how}"
                      + (f": {entry.error}" if entry.error else ""), highlight=False, soft_wrap=True)

    entries = run(spec, flags, rerun=rerun, on_model=said, executor=executor, address=address, workers=workers,
                  corpus=corpus)
    card = scorecard.build(entries)
    d = scorecard.diff(old, entries) if old is not None else None
    _show(card, d)
    _write(err, entries, card, d, json_path, markdown_path, html_path)
    failed = [e for e in entries if not e.passed]
    return 1 if failed or (d and d["worse"]) else 0


def _corpus(err, spec: Path | None, onnx_conformance: bool, ops: str | None, cases: str):
    """The conformance corpus's ``(items, defaults, state folder)`` with --onnx-conformance, else None."""
    from portability.core.errors import UsageError

    if not onnx_conformance:
        if spec is None:
            raise UsageError("audit: give a folder of models or a manifest (or --onnx-conformance)")
        if ops or cases != "one":
            raise UsageError("--ops and --cases go with --onnx-conformance")
        return None
    if spec is not None:
        raise UsageError("--onnx-conformance builds its own corpus: give no folder or manifest")
    from portability.audit import conformance
    from portability.core.dirs import default_root

    err.print("audit: building the ONNX conformance corpus from the installed onnx package…", highlight=False)
    found, left_out = conformance.build(default_root() / "onnx-conformance",
                                        [o.strip() for o in (ops or "").split(",") if o.strip()] or None, cases)
    err.print(f"audit: {len(found)} conformance cases over {len({i.op for i in found})} op types"
              + (f" ({len(left_out)} cases left out: their values are not numeric tensors)" if left_out else ""),
              highlight=False)
    down = sum(1 for i in found if i.versions and "to" in i.versions)
    still = [i.name for i in found if i.versions and "refused" in i.versions]
    if down or still:
        err.print(f"audit: {down} cases converted down to the IR version and opset the reference reads"
                  + (f"; {len(still)} it still cannot read ({', '.join(still)})" if still else ""), highlight=False)
    return found, {}, Path.cwd()


def _show(card: dict, d: dict | None) -> None:
    """The scorecard in the terminal: the per-target table, failing ops, conformance, the baseline's changes."""
    from rich.console import Console
    from rich.table import Table

    out = Console() if Console().is_terminal else Console(width=160)
    from portability.core.status import Status

    table = Table("target", "pass rate", "passed", "failures", "median size", "median p50 ms",
                  title=f"audit: {card['models_passed']} of {card['models']} models passed", title_justify="left")
    for tid, t in card["targets"].items():
        fails = ", ".join(f"{s} {n}" for s, n in t["by_status"].items() if s not in (Status.PASS, Status.SKIPPED)) or "–"
        table.add_row(tid, "–" if t["pass_rate"] is None else f"{t['pass_rate']:.0%}", f"{t['pass']}/{t['models']}",
                      fails, "–" if not t["median_size_bytes"] else f"{t['median_size_bytes'] / 1024:.1f} KB",
                      "–" if t["median_p50_ms"] is None else f"{t['median_p50_ms']:.3g}")
    out.print(table)
    for f in card["failures_by_op"][:10]:
        out.print(f"  {f['target']}: op {f['op']} fails in {f['models']} model(s)", highlight=False)
    if card.get("conformance"):
        for tid, t in card["conformance"]["targets"].items():
            out.print(f"  conformance {tid}: " + (f"{t['ops_passing']}/{t['ops']} op types, {t['cases_passing']}/{t['cases']} cases pass"
                                                   if t["ops"] else Status.SKIPPED), highlight=False)
    if d is not None:
        out.print(f"against the baseline: {len(d['worse'])} worse, {len(d['fixed'])} fixed, {len(d['changed'])} other changes; "
                  "latency " + ", ".join(f"{k} {n}" for k, n in d["latency"].items() if n), highlight=False)
        for r in d["worse"][:10]:
            out.print(f"  worse: {r['model']} {r['target'] or '(the model)'}: {r['was']} -> {r['now']}", highlight=False)
        for r in d["fixed"][:10]:
            out.print(f"  fixed: {r['model']} {r['target'] or '(the model)'}: {r['was']} -> {r['now']}", highlight=False)


def _write(err, entries: list, card: dict, d: dict | None, json_path: Path | None, markdown_path: Path | None,
           html_path: Path | None) -> None:
    """The audit's files: its JSON (the models without their whole reports), Markdown, HTML and model pages."""
    import json

    from portability.report import scorecard
    from portability.report.files import write_atomic

    lean = [{k: v for k, v in e.to_dict().items() if k != "report"} for e in entries]
    if json_path:
        write_atomic(json_path, json.dumps({"models": lean, "scorecard": card, **({"baseline": d} if d else {})},
                                           indent=1, default=str) + "\n")
        err.print(f"audit: {json_path}")
    if markdown_path:
        write_atomic(markdown_path, scorecard.markdown(card) + (scorecard.diff_markdown(d) if d else ""))
    if html_path:
        write_atomic(html_path, scorecard.html(card, _model_pages(html_path, entries), d))
        err.print(f"audit: {html_path}")


def _baseline(path: Path) -> list:
    """The entries of an earlier audit's ``--json`` (``ModelResult``; one written with the older words,
    passed / failed / error, is read too)."""
    import json

    from portability.audit.unit import ModelResult
    from portability.core.errors import UsageError

    try:
        doc = json.loads(Path(path).read_text())
        models = doc["models"]
        assert isinstance(models, list) and all("path" in m and "status" in m for m in models)
        return [ModelResult.from_dict(m) for m in models]
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        raise UsageError(f"--baseline {path}: not the --json of an earlier audit") from None


def _model_pages(html_path: Path, entries: list) -> dict[str, str]:
    """Each model's own full HTML report, in ``<html stem>-models/`` beside the scorecard: path -> link."""
    import re

    from portability.report import html
    from portability.report.files import write_atomic
    from portability.report.schema import Report

    folder = html_path.parent / f"{html_path.stem}-models"
    folder.mkdir(parents=True, exist_ok=True)
    links = {}
    for i, e in enumerate(entries):
        if not e.report:
            continue
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", e.name or Path(e.path).name)
        page = folder / f"{i + 1:04d}-{name}.html"
        write_atomic(page, html.render(Report.from_dict(e.report)))
        links[e.path] = f"{folder.name}/{page.name}"
    return links
