"""``portability quantize-report MODEL --target ID``: where a quantized variant's error comes from
(``explain/rescue.py``), and with ``--search`` the smallest float fallback that passes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from portability.cli.options import JsonOpt, QuietOpt, takes_settings
from portability.core.status import Status


@takes_settings("fix")
def quantize_report(
    model: Path = typer.Argument(..., help="An ONNX model.", show_default=False),
    target: str = typer.Option(..., "--target", "-t", help="A quantized or half-precision target id (server/ort-qdq, "
                               "server/ort-int8, mobile/tflite-int8, web/ort-webgpu-fp16...).", show_default=False),
    search: bool = typer.Option(False, "--search", help="Also search the smallest set of layers kept in float under "
                                "which the target passes (what `fix` does for a quantized target)."),
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
    **settings: Any,
) -> int:
    """Per layer that TARGET's converter quantizes: the SNR of its quantized output against the float model's on
    the same inputs, its sensitivity (the model's output SNR with that layer alone quantized), and its outlier
    channels (one channel's magnitude many times the others': per-tensor int8 then spends its steps on it),
    ranked worst first. Give --dataset to judge accuracy as check does. Each figure is a check of the model
    on the target: one per layer plus two; --search adds about 2·log2(layers) for the shortest passing
    prefix of the ranking, one per layer of it to prune it back, and two to measure its cost. With --json, the layers' sensitivity is also written as Model
    Explorer node data beside it (FILE.node_data.json), to colour the graph by quantization error.

    Exit 0 when the target passes as it is (or, with --search, under a float fallback), 1 otherwise, 2 on a usage
    error."""
    from rich.console import Console

    from portability.cli.check import _say_sandbox
    from portability.explain import fix as fixing
    from portability.explain import rescue
    from portability.settings.options import resolve

    err = Console(stderr=True)
    opts = resolve(settings, {"targets": target})
    _say_sandbox(opts.sandbox, err)
    say = (lambda s: None) if quiet else (lambda s: err.print(f"  {s}…", highlight=False))
    doc: dict = {}
    try:
        with fixing.opened(model, opts) as (info, session):
            rescue.report_of(model, target, opts, session, info, say, search=search, doc=doc)
    except KeyboardInterrupt:
        if json_path and doc.get("layers"):  # what was measured is kept, said as interrupted
            doc["interrupted"] = True
            json_path.write_text(json.dumps(doc, indent=2, default=str))
            err.print(f"interrupted: the report so far ({len(doc['layers'])} layers measured): {json_path}")
        raise
    show(doc)
    if json_path:
        json_path.write_text(json.dumps(doc, indent=2, default=str))
        colours = json_path.with_name(json_path.stem + ".node_data.json")
        colours.write_text(json.dumps(rescue.node_data(doc), indent=1))
        err.print(f"report: {json_path}; Model Explorer node data: {colours}")
    return 0 if doc["status"] == Status.PASS or (doc.get("rescue") or {}).get("float_nodes") else 1


def show(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console() if Console().is_terminal else Console(width=160)
    table = Table("layer", "op", "SNR dB", "alone dB", "outlier channels", title=f"{doc['target']} ({doc['status']}, "
                  f"output SNR {_db(doc.get('snr_db'))}): {doc['candidates']} quantized layers, worst first "
                  f"({doc['checks']} checks, {doc['seconds']} s)", title_justify="left")
    for x in doc["layers"]:
        ch = ", ".join(map(str, x["outlier_channels"]))
        if ch and x.get("others_share") is not None:
            ch += f" (the others use {x['others_share']:.1%} of the range)"
        exact = x["sensitivity_db"] is None and x.get("sensitivity_status") == Status.PASS
        alone = "exact" if exact else _db(x["sensitivity_db"])
        table.add_row(x["node"], x["op_type"], _db(x["snr_db"]), alone, ch or "–")
    out.print(table)
    r = doc.get("rescue")
    if r:
        out.print(rescue_line(r), highlight=False, soft_wrap=True)


def rescue_line(r: dict) -> str:
    if not r.get("float_nodes"):
        return f"no float fallback: {r.get('why', '')}"
    b, a = r.get("before") or {}, r.get("after") or {}
    acc = f"; accuracy {_num(b.get('accuracy'))} -> {_num(a.get('accuracy'))}" if a.get("accuracy") is not None else ""
    return (f"passes with {len(r['float_nodes'])} layer(s) in float: {', '.join(r['float_nodes'])} "
            f"(size {_kb(b.get('size_bytes'))} -> {_kb(a.get('size_bytes'))}, p50 {_num(b.get('p50_ms'))} -> "
            f"{_num(a.get('p50_ms'))} ms{acc}); set: {r['option']}")


def _db(v) -> str:
    return "–" if v is None else f"{v:.1f}"


def _num(v) -> str:
    return "–" if v is None else f"{v:.4g}"


def _kb(v) -> str:
    return "–" if v is None else f"{v / 1024:.1f} KB"
