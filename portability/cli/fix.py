"""``portability fix MODEL --target ID``: the first documented alternative under which a failing target passes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from portability.cli.options import JsonOpt, QuietOpt, takes_settings
from portability.core.status import Status


@takes_settings("fix")
def fix(
    model: Path = typer.Argument(..., help="The model (any source format check reads).", show_default=False),
    target: str = typer.Option(..., "--target", "-t", help="The failing target id (mobile/tflite-fp32, server/tf...).", show_default=False),
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
    **settings: Any,
) -> int:
    """Check TARGET again under each documented alternative that applies to its route (onnx2tf options such
    as -rtpo for ops TFLite lacks, -nuo, -dgc, -ebu, -kat, -ofgd, -agj for a drift; ONNX Runtime's graph
    optimization levels) until one passes, and say which, with the setting that selects it. A quantized target
    that drifts (server/ort-qdq, ort-int8, ort-fp16, ort-q4, mobile/tflite-int8 and their twins) gets its
    quantizer's calibration alternatives, then the smallest set of its layers kept in float under which it
    passes (ranked by `portability quantize-report`), with its size and latency before and after. Give
    --dataset to judge accuracy. An alternative under which the target converts but drifts is reported as
    drifting, never as a fix.

    Exit 0 when the target passes as it is or under an alternative, 1 when none passes, 2 on a usage error."""
    from rich.console import Console

    from portability.cli.check import _say_sandbox
    from portability.explain import fix as engine
    from portability.settings.options import resolve
    from portability.report.localized import fix_line

    err = Console(stderr=True)
    opts = resolve(settings, {"targets": target})
    _say_sandbox(opts.sandbox, err)
    say = (lambda s: None) if quiet else (lambda s: err.print(f"  {s}…", highlight=False))
    with engine.opened(model, opts) as (info, session):
        doc = engine.search(model, target, opts, session, info, say)
    out = Console() if Console().is_terminal else Console(width=160)
    for x in doc["tried"]:
        out.print(f"  {x['alternative']}: {x['status']}" + (f" ({x['error']})" if x.get("error") else ""), highlight=False,
                  soft_wrap=True)
    out.print(f"{target} ({doc['status']}): " + (doc["why"] if doc.get("why") and not doc["tried"] else fix_line(doc)),
              highlight=False, soft_wrap=True)
    if json_path:
        json_path.write_text(json.dumps(doc, indent=2))
        err.print(f"report: {json_path}")
    return 0 if doc["passing"] or doc["status"] == Status.PASS else 1
