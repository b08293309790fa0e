"""What a metric sees: one target's outputs and run, next to the reference's (``Evaluation``).

Every metric module has ``FIELDS`` (the report metrics it owns, with their empty values), ``THRESHOLDS``
(its bounds: ``Threshold`` — the default, ``None`` = not checked, and the command-line flag with its help
where it has one; the settings file's key is the name in ``[thresholds]``), ``compute(ev) -> (fields,
problems)`` and ``breaches(metrics, thresholds) -> [reasons]``; ``portability.metrics.METRICS`` lists them.
A metric that two runs can regress on also has ``TOLERANCES`` (what counts as noise: the keys of
``[tool.portability.regression]``, with their defaults) and ``regressions(before, after, thresholds, tol) ->
[Moved]`` on two runs of a target (``report.diff`` and ``--baseline`` ask every metric; only where both
runs ran, unless ``NEEDS_RUN = False``), with ``REGRESSION_KINDS``, the kinds of change it reports (the
order ``report.diff`` lists changes in is every metric's kinds, in registry order). How a metric shows:
``COLUMNS`` (its cells in the summary table of the terminal, Markdown and HTML reports: ``Column``) and
``SECTIONS`` (its own part of the HTML or Markdown report: ``Section``) and ``PLOTS`` (its plots in the
HTML report: ``Plot``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from portability.core.protocol import WorkerResult


@dataclass(frozen=True)
class Threshold:
    """One bound a metric checks: its default (None: not checked unless set) and, where a flag sets it,
    the flag's name (``--max-abs``: the setting ``max_abs`` of ``check``, ``portability.check()`` and
    ``[tool.portability]``) and what it bounds (the help text; the default is added to it)."""

    default: float | None
    flag: str | None = None
    help: str = ""
    #: a floor (the value must stay above it: cosine), not a ceiling (max_abs)
    floor: bool = False


@dataclass(frozen=True)
class Moved:
    """A metric that moved between two runs of a target beyond its tolerance (``regressions``)."""

    #: the kind of change it is, one of its metric's ``REGRESSION_KINDS``: drift, accuracy, size, latency
    kind: str
    metric: str
    before: Any
    after: Any
    #: worse beyond tolerance
    worse: bool
    text: str


def number(v: Any) -> float | None:
    """A report's number (``"inf"``/``"nan"`` as JSON keeps them) as a float; None for anything else."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if v in ("inf", "-inf", "nan"):
        return float(v)
    return None


#: the media a report is rendered to
MEDIA = ("terminal", "markdown", "html")


@dataclass(frozen=True)
class Column:
    """A metric's column in the summary table: ``cell(target, medium) -> text`` (the renderer escapes it)."""

    header: str
    cell: Callable[[Any, str], str]
    media: tuple[str, ...] = MEDIA
    #: the header where a medium names it otherwise ({medium: header})
    headers: dict = field(default_factory=dict)
    #: (report) -> whether the table has this column at all (default: always)
    shown: Callable[[Any], bool] | None = None

    def head(self, medium: str) -> str:
        return self.headers.get(medium, self.header)


@dataclass(frozen=True)
class Section:
    """A metric's own part of a report: ``render(report, page) -> text`` ("" for none), where ``page`` gives
    the medium's primitives (HTML: ``e`` escape, ``num``, ``table(head, rows, numeric_from)``; Markdown:
    ``cell``). ``place``: ``summary`` (after the targets and the baseline's changes) or ``detail`` (before
    the conversions)."""

    title: str
    render: Callable[[Any, Any], str]
    medium: str = "html"
    place: str = "detail"


@dataclass(frozen=True)
class Plot:
    """A metric's plot in the HTML report: ``draw(report, kit) -> svg or None`` (``kit``: ``report.plots.KIT``,
    the figure, the SVG export and the colours). ``order``: where it shows among every metric's plots."""

    title: str
    draw: Callable[[Any, Any], str | None]
    order: int = 100


def fmt(v: Any, spec: str, medium: str) -> str:
    """A report number in a table cell: "–" for none, a string (JSON's "inf") as it is."""
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and not math.isfinite(v) and medium != "markdown":
        return "inf" if medium == "terminal" or v > 0 else "nan"
    return format(v, spec)


@dataclass(frozen=True)
class Evaluation:
    worker: WorkerResult
    #: the target's outputs (stacked over batches, or per batch where the shape varies)
    outputs: dict[str, np.ndarray | list[np.ndarray]]
    #: the reference's outputs; None when this target is the reference
    reference: dict[str, np.ndarray | list[np.ndarray]] | None
    output_names: tuple[str, ...]
    labels: np.ndarray | None = None
    #: the output read as class scores (chosen on the reference)
    score_name: str | None = None
    #: the reference's own metrics (accuracy, latency), once it ran
    reference_metrics: dict = field(default_factory=dict)
    #: the robustness pass (``--robustness``): the perturbed set (``metrics.robustness.perturb.PerturbedSet``, arrays
    #: aside), this target's and the reference's outputs on it, and what the adversarial part could do
    perturbed: Any = None
    perturbed_outputs: dict[str, np.ndarray] | None = None
    reference_perturbed: dict[str, np.ndarray] | None = None
    adversarial: dict | None = None
    #: ``--generate``: this target's and the reference's decoding (a loaded ``generation.npz``: ``tokens``,
    #: ``logits``, and ``forced_logits`` under teacher forcing), None without
    generation: dict | None = None
    reference_generation: dict | None = None
    #: the target's bounds (``metrics.thresholds``): what a metric that decides more than a number needs
    thresholds: dict = field(default_factory=dict)

    @property
    def is_reference(self) -> bool:
        return self.reference is None
