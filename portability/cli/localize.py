"""``portability localize MODEL --target ID``: the first node whose output diverges there (``explain/localize.py``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from portability.cli.options import JsonOpt, QuietOpt, takes_settings
from portability.core.status import Status


@takes_settings("localize")
def localize(
    model: Path = typer.Argument(..., help="An ONNX model, or a model of another format whose route to TARGET passes through ONNX (localized on the check's own ONNX export).", show_default=False),
    target: str = typer.Option(..., "--target", "-t", help="The target id to localize on (web/ort-webgpu, mobile/tflite-fp32...).", show_default=False),
    json_path: JsonOpt = None,
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for the reproducer (an ONNX file and its inputs), the inputs used and localize.json. Default: ./portability-localize/MODEL-TARGET."),
    quiet: QuietOpt = False,
    **settings: Any,
) -> int:
    """Find the first node of MODEL's graph (topological order) whose output diverges on TARGET, with the
    drift curve along the graph and a reproducer: the node alone, fed with the reference's values of its
    inputs (else the graph cut at that node), checked by itself on the target.

    Targets that run the ONNX graph (ONNX Runtime on the server, in the browser, ORT format) return every
    node's output; converted ones (TFLite, TF.js, SavedModel) are bisected over the graph's cuts (about
    log2(nodes) conversions). A target that fails to convert, load or run is bisected on the failure.
    A .pt2, Keras or SavedModel source is localized on the ONNX export its check makes (the reference is
    then ONNX Runtime on that export), for targets whose route passes through ONNX.

    Exit 0 when nothing diverges on the target, 1 when it does (localized or not), 2 on a usage error."""
    from rich.console import Console

    from portability.cli.check import _say_sandbox
    from portability.explain import localize as engine
    from portability.settings.options import resolve

    err = Console(stderr=True)
    opts = resolve(settings, {"targets": target})
    _say_sandbox(opts.sandbox, err)
    where = out or Path("portability-localize") / f"{model.stem}-{target.replace('/', '_')}"
    say = (lambda s: None) if quiet else (lambda s: err.print(f"  {s}…", highlight=False))
    doc = engine.run(model, target, opts, where, say)
    _show(doc)
    if json_path:
        json_path.write_text(json.dumps(doc, indent=2, default=str))
        err.print(f"report: {json_path}")
    return 0 if doc["status"] == Status.PASS else 1


def _show(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console() if Console().is_terminal else Console(width=160)
    first = doc.get("first_divergence")
    if doc.get("source"):
        out.print(f"a {doc['source']['format']} model, localized on {doc['source']['localized_on']}", highlight=False, soft_wrap=True)
    if doc.get("curve"):
        table = Table("#", "node", "op", "max |Δ|", "cosine", "", title=f"{doc['target']}: {doc['method']} "
                      f"({doc['conversions']} checks, {doc['nodes']} nodes)", title_justify="left")
        for c in doc["curve"]:
            mark = "[red]diverges[/]" if c["diverges"] else "[green]clean[/]"
            if c.get("status"):
                mark = f"[red]{c['status']}[/]"
            if c.get("constant"):
                mark += " [yellow]constant[/]"
            table.add_row(str(c["index"]), c["node"] or "–", c["op_type"], _num(c.get("max_abs")), _num(c.get("cosine"), "cos"),
                          mark, style="bold" if first and c["index"] == first["index"] else None)
        out.print(table)
    if first is None:
        out.print(f"{doc['target']}: {doc['status']}; {doc.get('why', '')}", highlight=False)
        return
    ins = ", ".join(f"{k} {_num(v)}" for k, v in first["inputs_max_abs"].items())
    blame = ("its inputs agree: the op itself " + ("fails here" if doc.get("mode") == "error" else "computes differently here")
             if first["op_at_fault"] else "its inputs differ already")
    label = {"error": "first failing node", "constant": "first node whose output ignores the input"}.get(doc.get("mode"), "first divergence")
    out.print(f"[bold]{label}[/]: node {first['node'] or '(unnamed)'} ({first['op_type']}, #{first['index']}): "
              f"max |Δ| {_num(first.get('max_abs'))}, cosine {_num(first.get('cosine'), 'cos')}; inputs max |Δ| {ins}: {blame}",
              highlight=False, soft_wrap=True)
    if first.get("error"):
        out.print(f"  error there: {first['error']}", highlight=False, soft_wrap=True)
    if doc.get("first_constant") and doc.get("mode") != "constant":
        c = doc["first_constant"]
        out.print(f"[yellow]the output stops depending on the input[/] at node {c['node'] or '(unnamed)'} ({c['op_type']}, #{c['index']})",
                  highlight=False)
    ab = doc.get("kernels_ab")
    if ab:
        out.print(f"LiteRT's reference kernels at that node: max |Δ| {_num(ab['reference_kernels']['max_abs'])} "
                  f"(XNNPACK {_num(ab['default']['max_abs'])}): {ab['verdict']}", highlight=False, soft_wrap=True)
    r = doc.get("reproducer")
    if r:
        verdict = "[red]reproduces[/] it by itself" if r["reproduces"] else "does [bold]not[/] reproduce it by itself"
        out.print(f"reproducer ({r['kind']}): {r['model']} with {r['inputs']}: {verdict} on {doc['target']}", highlight=False,
                  soft_wrap=True)


def _num(v, kind: str = "abs") -> str:
    if v is None:
        return "–"
    return f"{v:.6f}" if kind == "cos" else f"{v:.2e}"
