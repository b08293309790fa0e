"""The HTML report's plots, drawn by matplotlib and returned as inline SVG (text, no file, no font or
script fetched). Each metric declares its own (``PLOTS``: drift per target on a log scale, latency
distribution, size per variant, accuracy or top-1 agreement, robustness curves); this module gives them
the figure, the SVG export and the colours (``KIT``). A plot with nothing to show returns None.

matplotlib is imported inside each function: importing this module stays light.
"""
from __future__ import annotations

import io
import math
import re
from types import SimpleNamespace

from portability.core.status import Status
from portability.report.schema import Report, TargetResult

STATUS_COLOR = {Status.PASS: "#2e7d32", Status.DRIFT: "#c62828", Status.FALLBACK: "#ef6c00", Status.SKIPPED: "#9e9e9e"}
ERROR_COLOR = "#b71c1c"
REFERENCE_COLOR = "#1565c0"
#: where a zero (bit-identical) drift is drawn on the log axis
ZERO_FLOOR = 1e-12


def _color(t: TargetResult) -> str:
    return STATUS_COLOR.get(t.status, ERROR_COLOR)


def _figure(n_rows: int, width: float = 7.5):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, max(1.6, 0.9 + 0.32 * n_rows)), dpi=96, layout="constrained")
    return fig, fig.add_subplot()


def _svg(fig, title: str) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "portability"}):
        fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML declaration and DOCTYPE: the SVG sits inside HTML
    # a fixed width/height in pt would overflow a narrow window: let CSS size it, keep the aspect ratio
    svg = re.sub(r'<svg([^>]*?) width="[\d.]+pt" height="[\d.]+pt"', r'<svg\1', svg, count=1)
    return svg.replace("<svg", f'<svg role="img" aria-label="{title}"', 1)


def _finite(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


#: what a metric's plot draws with (``metrics.base.Plot``)
KIT = SimpleNamespace(figure=_figure, svg=_svg, color=_color, finite=_finite, ZERO_FLOOR=ZERO_FLOOR,
                      REFERENCE_COLOR=REFERENCE_COLOR)


def all_plots(report: Report) -> list[tuple[str, str | None]]:
    """(title, svg or None) for every metric's plot (``PLOTS`` of each metric), in the order the report shows them."""
    from portability.metrics import plots

    return [(p.title, p.draw(report, KIT)) for p in plots()]
