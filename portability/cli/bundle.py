"""``portability bundle MODEL --targets web|mobile -o DIR`` and ``portability ingest RESULT``: the web targets
run in a person's own browser, the mobile ones on a device (``run.py``), and their results brought back
into a report."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def bundle(
    model: Path = typer.Argument(..., help="The model (as for check).", show_default=False),
    out: Path = typer.Option(..., "--out", "-o", help="The folder to write (new or empty).", show_default=False),
    targets: str = typer.Option("web", "--targets", "-t", help="web or mobile (a platform or its target ids, comma-separated; one platform per bundle)."),
    shape: Optional[list[str]] = typer.Option(None, "--shape", help="NAME=DIMS for dynamic dimensions (as for check)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the check's JSON report here (for ingest --report)."),
    no_history: bool = typer.Option(False, "--no-history", help="Do not record the check in the history database."),
    serve: bool = typer.Option(False, "--serve", help="Then serve the folder read-only over HTTP until interrupted."),
    host: str = typer.Option("127.0.0.1", "--host", help="With --serve: the address to listen on (IPv4 or IPv6; another than loopback warns)."),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="With --serve: the port (0: a free one)."),
) -> int:
    """Check MODEL on its reference and the web or mobile targets here, then write a folder that runs those
    targets in any browser (index.html) or on a device with Python (run.py), compares them with the
    reference's outputs there and writes result.json."""
    from rich.console import Console

    from portability.bundle import build, platform_of
    from portability.cli import outputs

    err = Console(stderr=True)
    outputs.require_writable(json_path)
    server = None
    if serve:
        if platform_of(targets) != "web":
            from portability.core.errors import UsageError

            raise UsageError("--serve serves a web bundle: a mobile bundle's folder is copied to the device")
        from portability.bundle.serve import BundleServer

        server = BundleServer(out, host, port)  # a wrong or taken address: refused before the check runs
    try:
        with err.status("checking and bundling…"):
            b = build(model, targets, out, shapes=shape or None)
        _report(b, json_path, no_history, out, err)
        if server is not None:
            _serve(server, err)
    finally:
        if server is not None:
            server.close()
    return 0


def _report(b, json_path: Optional[Path], no_history: bool, out: Path, err) -> None:
    from portability.cli import outputs

    if json_path:
        from portability.report.files import write_json

        write_json(b.report, json_path)
        err.print(f"report: {json_path}")
    if not no_history:
        run_id, why = outputs.record(b.report)
        err.print(f"history: run {run_id}" if run_id is not None else f"[yellow]history not recorded:[/] {why}", highlight=False)
    for line in b.skipped:
        err.print(f"[yellow]not bundled:[/] {line}", highlight=False, soft_wrap=True)
    err.print(f"bundle: {out} ({', '.join(t['id'] for t in b.manifest['targets'])})", highlight=False)


def _serve(server, err) -> None:
    """The bound URL on stdout (its first line), a warning first where it is not loopback; until interrupted."""
    if not server.loopback:
        where = f"every interface of this machine, port {server.port}" if server.every_interface else server.url
        err.print(f"[yellow]warning:[/] serving on {where}: not loopback, so whoever can reach this machine can read the "
                  "bundle (its model and inputs); open it by this machine's IP address or name", highlight=False, soft_wrap=True)
    print(server.url, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


def ingest(
    result: Path = typer.Argument(..., help="The result.json a bundle's page or run.py wrote.", show_default=False),
    report: Optional[str] = typer.Option(None, "--report", help="The report it joins: a history run id or a JSON report (default: the last check of that model in the history with those targets)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the report with the result's targets added here (JSON)."),
    no_history: bool = typer.Option(False, "--no-history", help="Do not record the joined report in the history database."),
) -> int:
    """Add a bundle's results to a report, as web/TARGET@DEVICE or mobile/TARGET@DEVICE targets; a file that
    is truncated, of another model or inconsistent is refused (exit 2) and nothing is written."""
    from rich.console import Console

    from portability.bundle.ingest import base_report, merge, read
    from portability.cli import outputs
    from portability.metrics.drift import worst

    err = Console(stderr=True)
    outputs.require_writable(out)
    doc = read(result)
    base, label = base_report(doc, report)
    joined, added = merge(base, doc, str(result))
    if out:
        from portability.report.files import write_json

        write_json(joined, out)
        err.print(f"report: {out}")
    if not no_history:
        run_id, why = outputs.record(joined)
        err.print(f"history: run {run_id}" if run_id is not None else f"[yellow]history not recorded:[/] {why}", highlight=False)
    for t in added:
        mx, cos = worst(t, "numbers")
        p50 = ((t.metrics or {}).get("latency_ms") or {}).get("p50")
        err.print(f"  {t.status:<10} {t.id}  max_abs {mx if mx is not None else '–'}  cosine {cos if cos is not None else '–'}  "
                  f"p50 {f'{p50:.3f} ms' if p50 is not None else '–'}{'  ' + (t.error or '; '.join(t.breaches)) if t.error or t.breaches else ''}",
                  highlight=False, markup=False, soft_wrap=True)
    err.print(f"joined {label}: {len(added)} target(s)", highlight=False)
    return 0
