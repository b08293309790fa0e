"""``portability history --html DIR``: a static, offline site of the history (like the published history of
a benchmark suite). ``index.html`` lists the models; a page per model plots, per target, the worst drift,
the accuracy (or top-1 agreement), the artifact size and the p50 latency across its runs — a versioned
target (``TARGET@VERSION``, from ``check --versions``) is a line of its own, so versions sit side by side —
with a table of the runs linking to each run's own HTML report (``runs/<id>.html``). Nothing is fetched:
plots are inline SVG.
"""
from __future__ import annotations

import hashlib
import html as _html
import re
from collections import defaultdict
from pathlib import Path

from portability.core.status import Status
from portability.report.schema import Report

#: the metrics plotted per model: (title, how to read it from a target, log scale)
METRICS = (
    ("Worst |Δ| against the reference", "worst", True),
    ("Accuracy (or top-1 agreement)", "accuracy", False),
    ("Artifact size (KB)", "size", False),
    ("p50 latency (ms)", "latency", True),
)
ZERO_FLOOR = 1e-12


def _e(v) -> str:
    return _html.escape("" if v is None else str(v))


def _value(t, what: str) -> float | None:
    from portability.metrics import drift

    m = t.metrics or {}
    if what == "worst":
        v = drift.worst(t, "finite")[0]
        return None if v is None else max(v, ZERO_FLOOR)
    if what == "accuracy":
        v = m.get("accuracy") if m.get("accuracy") is not None else drift.agreement(t)
        return float(v) if isinstance(v, (int, float)) else None
    if what == "size":
        n = (t.artifact or {}).get("size_bytes")
        return n / 1024 if n else None
    v = (m.get("latency_ms") or {}).get("p50")
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "model"


def _plot(title: str, series: dict[str, list[tuple[int, float]]], log: bool) -> str | None:
    """Lines over run ids, one per target; inline SVG (None: nothing to plot)."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    import io

    import matplotlib
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 3.2), dpi=96, layout="constrained")
    ax = fig.add_subplot()
    for name, pts in sorted(series.items()):
        xs, ys = zip(*sorted(pts))
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=name)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("run")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncols=2, loc="best")
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "portability"}):
        fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r'<svg([^>]*?) width="[\d.]+pt" height="[\d.]+pt"', r'<svg\1', svg, count=1)
    svg = svg.replace("<svg", '<svg role="img" aria-label="' + _e(title) + '"', 1)
    return f"<figure><figcaption>{_e(title)}</figcaption>{svg}</figure>"


CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#222}main{max-width:1100px;margin:auto;padding:1em 2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border-bottom:1px solid #ddd;padding:.25em .6em;text-align:left}
.pass{color:#2e7d32}.fail{color:#c62828}figure{margin:1em 0}figure svg{width:100%;height:auto}
figcaption{font-weight:600}.meta{color:#666}"""


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>{body}</main></body></html>\n")


def _model_page(name: str, runs: list[tuple[int, Report]]) -> str:
    figs = []
    for title, what, log in METRICS:
        series: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for run_id, r in runs:
            for t in r.targets:
                v = _value(t, what)
                if v is not None and not (what == "worst" and t.id == r.reference):
                    series[t.id].append((run_id, v))
        fig = _plot(title, series, log)
        if fig:
            figs.append(fig)
    rows = "".join(
        f"<tr><td><a href=\"runs/{rid}.html\">run {rid}</a></td><td>{_e(r.created_at)}</td>"
        f"<td>{_e(str(r.model.get('sha256', ''))[:12])}</td><td class={Status.PASS if r.passed else 'fail'}>"
        f"{'passed' if r.passed else 'failed'}</td><td>{sum(t.status == Status.PASS for t in r.targets)} / {len(r.targets)}</td>"
        f"<td>{_e(', '.join(f'{k} {v}' for k, v in sorted((r.environment.get('packages') or {}).items()) if k in ('onnxruntime', 'tensorflow-cpu', 'ai-edge-litert')))}</td></tr>"
        for rid, r in reversed(runs))
    return _page(f"portability history — {name}",
                 f"<p><a href=\"index.html\">all models</a></p><h1>{_e(name)}</h1>"
                 f"<p class=meta>{len(runs)} runs; one line per target (a versioned target TARGET@VERSION is its own line)."
                 f"</p>{''.join(figs) or '<p>Nothing to plot.</p>'}<h2>Runs</h2><table><tr><th>run</th><th>time</th>"
                 f"<th>model sha256</th><th>verdict</th><th>passed</th><th>packages</th></tr>{rows}</table>")


def write(out: Path, runs: list[tuple[int, Report]]) -> list[Path]:
    """Write the site for ``runs`` ((run id, report), any order) into ``out``; the pages written."""
    from portability.report.files import write_atomic
    from portability.report.html import render as render_run

    out = Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    by_model: dict[str, list[tuple[int, Report]]] = defaultdict(list)
    for rid, r in sorted(runs, key=lambda x: x[0]):
        by_model[str(r.model.get("path", "model"))].append((rid, r))
        write_atomic(out / "runs" / f"{rid}.html", render_run(r))
    written, items = [], []
    for path, model_runs in sorted(by_model.items()):
        page = f"model-{_slug(Path(path).name)}-{hashlib.sha256(path.encode()).hexdigest()[:8]}.html"
        write_atomic(out / page, _model_page(Path(path).name, model_runs))
        written.append(out / page)
        last = model_runs[-1][1]
        items.append(f"<tr><td><a href=\"{page}\">{_e(Path(path).name)}</a></td><td class=meta>{_e(path)}</td>"
                     f"<td>{len(model_runs)}</td><td class={Status.PASS if last.passed else 'fail'}>"
                     f"{'passed' if last.passed else 'failed'}</td><td>{_e(last.created_at)}</td></tr>")
    write_atomic(out / "index.html", _page("portability history", "<h1>portability history</h1><table><tr><th>model</th>"
                 f"<th>path</th><th>runs</th><th>last verdict</th><th>last run</th></tr>{''.join(items)}</table>"))
    return [out / "index.html"] + written
