"""What a metric sees: one target's outputs and run, next to the reference's (``Evaluation``).

Every metric module has ``FIELDS`` (the report metrics it owns, with their empty values), ``THRESHOLDS``
(its bounds: ``Threshold`` — the default, ``None`` = not checked, and the command-line flag with its help
where it has one; the settings file's key is the name in ``[thresholds]``), ``compute(ev) -> (fields,
problems)`` and ``breaches(metrics, thresholds) -> [reasons]``; ``portability.metrics.METRICS`` lists them.
A metric that two runs can regress on also has ``TOLERANCES`` (what counts as noise: the keys of
``[tool.portability.regression]``, with their defaults) and ``regressions(before, after, thresholds, tol) ->
[Moved]`` (``report.diff`` and ``--baseline`` ask every metric).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


@dataclass(frozen=True)
class Moved:
    """A metric that moved between two runs of a target beyond its tolerance (``regressions``)."""

    #: the kind of change it is (``report.diff.KIND_ORDER``): drift, accuracy, latency
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
    #: the robustness pass (``--robustness``): the perturbed set (``core.perturb.PerturbedSet``, arrays
    #: aside), this target's and the reference's outputs on it, and what the adversarial part could do
    perturbed: Any = None
    perturbed_outputs: dict[str, np.ndarray] | None = None
    reference_perturbed: dict[str, np.ndarray] | None = None
    adversarial: dict | None = None

    @property
    def is_reference(self) -> bool:
        return self.reference is None
