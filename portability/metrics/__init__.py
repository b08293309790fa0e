"""The metrics: one concept per module, each with its report fields, default thresholds, computation and
breaches (see ``metrics.base``). This list is the registry: the empty metrics of a target, the default
thresholds and the reasons a target drifted are all derived from it. Adding a metric is one module and
one line here."""
from __future__ import annotations

from portability.metrics import accuracy, drift, generation, latency, memory, robustness, size

#: in the order reports show them
METRICS = (drift, accuracy, size, latency, memory, robustness, generation)

#: report fields that belong to the schema but that no metric fills yet
RESERVED: dict = {}


def empty() -> dict:
    """A target's metrics before (or without) a run."""
    out: dict = {}
    for m in METRICS:
        out.update({k: (dict(v) if isinstance(v, dict) else v) for k, v in m.FIELDS.items()})
    out.update(RESERVED)
    return out


def default_thresholds() -> dict[str, float | None]:
    return {k: t.default for m in METRICS for k, t in m.THRESHOLDS.items()}


def threshold_flags() -> dict:
    """{threshold name: its ``Threshold``} of every bound a command-line flag sets."""
    return {k: t for m in METRICS for k, t in m.THRESHOLDS.items() if t.flag}


def evaluate(ev) -> tuple[dict, list[str]]:
    """Every metric of one target, and the reasons (structural problems first) it is outside ``t``."""
    metrics = empty()
    problems: list[str] = []
    for m in METRICS:
        fields, found = m.compute(ev)
        metrics.update(fields)
        problems += found
    return metrics, problems


def breaches(metrics: dict, t: dict) -> list[str]:
    return [reason for m in METRICS for reason in m.breaches(metrics, t)]


def tolerances() -> dict:
    """{name: default} of what ``--baseline`` calls noise, over every metric (``[tool.portability.regression]``)."""
    return {k: v for m in METRICS for k, v in getattr(m, "TOLERANCES", {}).items()}


def regressions(a, b, tol, ran: bool = True) -> list:
    """Every metric's ``Moved`` between two runs of a target (``TargetResult``s), in registry order; where
    one of them did not run (``ran`` False), only the metrics that do not need a run."""
    return [x for m in METRICS if hasattr(m, "regressions") and (ran or not getattr(m, "NEEDS_RUN", True))
            for x in m.regressions(a, b, tol)]


def regression_kinds() -> tuple[str, ...]:
    """Every kind of change the metrics' ``regressions`` report (each metric's ``REGRESSION_KINDS``), in
    registry order, each once: the order ``report.diff`` lists changes in after its own kinds."""
    return tuple(dict.fromkeys(k for m in METRICS for k in getattr(m, "REGRESSION_KINDS", ())))


def columns(medium: str, report=None) -> list:
    """The metrics' summary-table columns for a medium (``metrics.base.MEDIA``), those the report has."""
    return [c for m in METRICS for c in getattr(m, "COLUMNS", ()) if medium in c.media
            and (c.shown is None or report is None or c.shown(report))]


def sections(medium: str, place: str | None = None) -> list:
    """The metrics' own report sections for a medium (and place), in registry order."""
    return [x for m in METRICS for x in getattr(m, "SECTIONS", ()) if x.medium == medium and place in (None, x.place)]


def plots() -> list:
    """Every metric's plots, in the order the HTML report shows them."""
    return sorted((p for m in METRICS for p in getattr(m, "PLOTS", ())), key=lambda p: p.order)
