"""The size of a target's artifact (the file or folder it runs: ``TargetResult.artifact``): no field of
its own in ``metrics`` — the pipeline measures the artifact — but its column, its section and what
``--baseline`` calls a regression: growth beyond ``size_growth`` of the baseline's size."""
from __future__ import annotations

from portability.metrics.base import Column, Moved, Plot, Section

FIELDS: dict = {}
THRESHOLDS: dict = {}
#: what --baseline calls noise: growth of an artifact's size as a fraction of the baseline's (0.10: 10 %)
TOLERANCES = {"size_growth": 0.10}
#: the kinds of change its ``regressions`` report
REGRESSION_KINDS = ("size",)
#: a target that failed still has its artifact when it converted: compared whether or not it ran
NEEDS_RUN = False


def compute(ev) -> tuple[dict, list[str]]:
    return {}, []


def breaches(metrics: dict, t: dict) -> list[str]:
    return []


def regressions(before, after, tol) -> list[Moved]:
    x, y = ((t.artifact or {}).get("size_bytes") for t in (before, after))
    if not x or not y or abs(y - x) <= tol.size_growth * x:
        return []
    kind = (after.artifact or {}).get("format", "artifact")
    return [Moved("size", "size_bytes", x, y, y > x, f"{kind} size {x:,} → {y:,} bytes ({(y - x) / x:+.0%})")]


def text(n, medium: str) -> str:
    """A size in bytes as each medium writes it."""
    if medium == "terminal":
        if n is None:
            return "–"
        for unit in ("B", "KB", "MB", "GB"):
            if n < 1024 or unit == "GB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
            n /= 1024
    if not n:
        return "–"
    if medium == "html" and n < 1024:
        return f"{n:,} B"
    return f"{n / 1024:.1f} KB" if n < 2**20 else f"{n / 2**20:.2f} MB"


COLUMNS = (Column("size", lambda t, medium: text((t.artifact or {}).get("size_bytes"), medium), media=("terminal", "markdown")),)


def _section(report, page) -> str:
    rows = [[page.e(t.id), page.e((t.artifact or {}).get("format", "–")), text((t.artifact or {}).get("size_bytes"), "html"),
             text((t.artifact or {}).get("gzip_bytes"), "html"), page.num((t.artifact or {}).get("files"), "d")]
            for t in report.targets if t.artifact]
    src = f"<p class=meta>Source model: {text(report.model.get('size_bytes'), 'html')}.</p>"
    return src + (page.table(["target", "format", "size", "gzip", "files"], rows, numeric_from=2) if rows else "")


SECTIONS = (Section("Size per format and variant", _section),)


def size_plot(report, kit) -> str | None:
    """Artifact size per format and variant (each distinct artifact once), raw and gzipped, with the
    source model's size marked."""
    seen: dict[str, tuple[str, list[str], int, int | None]] = {}
    for t in report.targets:
        a = t.artifact or {}
        if a.get("size_bytes"):
            entry = seen.setdefault(a.get("sha256") or t.id, (a.get("format", "?"), [], int(a["size_bytes"]), a.get("gzip_bytes")))
            entry[1].append(t.id.split("/", 1)[-1])
    if not seen:
        return None
    # one bar per distinct artifact, named by its format and the first target that runs it (+ how many more)
    rows = [(f"{fmt}: {names[0]}" + (f" +{len(names) - 1}" if len(names) > 1 else ""), size, gz)
            for fmt, names, size, gz in seen.values()]
    fig, ax = kit.figure(len(rows))
    ys = list(range(len(rows)))
    ax.barh([y - 0.18 for y in ys], [r[1] / 1024 for r in rows], height=0.36, color="#5c6bc0", label="file")
    ax.barh([y + 0.18 for y in ys], [(r[2] or 0) / 1024 for r in rows], height=0.36, color="#9fa8da", label="gzip")
    src = report.model.get("size_bytes")
    if src:
        ax.axvline(src / 1024, color="black", linestyle="--", linewidth=1, label="source model")
    ax.set_yticks(ys, [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("KB")
    fig.legend(fontsize=8, loc="outside upper right", ncols=3, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return kit.svg(fig, "size per format and variant")


PLOTS = (Plot("Size per format and variant", size_plot, order=30),)
