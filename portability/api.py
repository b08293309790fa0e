"""The Python API: ``portability.check(model, targets=..., dataset=..., **options) -> Report``.

The same pipeline as ``portability check`` (engine.pipeline.check with CheckOptions), without printing.
"""
from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Sequence

from portability.core.errors import UsageError
from portability.report.schema import Report

#: keyword options passed through to CheckOptions unchanged
PASSTHROUGH = {"inputs", "samples", "seed", "warmup", "runs", "jobs", "cache_dir", "use_cache"}


def _targets(targets: str | Sequence[str]) -> str:
    return targets if isinstance(targets, str) else ",".join(targets)


def _thresholds(given: dict | None) -> tuple[dict, dict]:
    """``{"max_abs": 1e-3, "mobile/tflite-fp16": {"max_abs": 5e-3}}`` -> (global, per target)."""
    given = dict(given or {})
    return ({k: v for k, v in given.items() if not isinstance(v, dict)},
            {k: dict(v) for k, v in given.items() if isinstance(v, dict)})


def options(targets: str | Sequence[str] = "server", *, dataset: str | os.PathLike | None = None,
            shapes: dict[str, Sequence[int]] | Sequence[str] | None = None, thresholds: dict | None = None,
            gate: Sequence[str] | None = None, value_range: tuple[float, float] = (0.0, 1.0),
            timeout: float | None = None, convert_timeout: float = 900.0, memory_limit_mb: float | None = None,
            time_budget: float | None = None, **rest):
    """CheckOptions from keyword arguments (unknown ones are a UsageError naming the known ones)."""
    import psutil

    from portability.engine.pipeline import CheckOptions
    from portability.engine.runner import Limits

    known = PASSTHROUGH & {f.name for f in fields(CheckOptions)}
    bad = [k for k in rest if k not in known]
    if bad:
        raise UsageError(f"unknown option '{bad[0]}' (known: dataset, shapes, thresholds, gate, value_range, timeout, "
                         f"convert_timeout, memory_limit_mb, time_budget, {', '.join(sorted(known))})")
    if isinstance(shapes, dict):
        shapes = [f"{k}={'x'.join(str(d) for d in v)}" for k, v in shapes.items()]
    user_t, per_target = _thresholds(thresholds)
    mem = memory_limit_mb if memory_limit_mb is not None else psutil.virtual_memory().total / 2**20 * 0.8
    limits = Limits(convert_timeout_s=float(convert_timeout), run_timeout_s=float(timeout or 300), memory_mb=float(mem))
    opts = CheckOptions(targets=_targets(targets), dataset=Path(dataset) if dataset else None, shapes=list(shapes or []),
                        value_range=tuple(value_range), limits=limits, thresholds=user_t, target_thresholds=per_target,
                        gate=list(gate or []), timeout_explicit=timeout is not None,
                        **{k: (Path(v) if k in ("inputs", "cache_dir") and v is not None else v) for k, v in rest.items()})
    if time_budget is not None:
        opts.time_budget_s = float(time_budget)
    return opts


def check(model: str | os.PathLike, targets: str | Sequence[str] = "server", dataset: str | os.PathLike | None = None,
          *, record_history: bool = False, **opts) -> Report:
    """Convert ``model`` (an ONNX file) for each target, run it there, compare with the server reference.

    ``targets``: platforms or target ids, a comma-separated string or a list (``["web", "mobile/tflite-int8"]``).
    ``dataset``: an ``.npz`` with inputs ``x`` and integer labels ``y`` (adds accuracy). Other options:
    ``inputs``, ``shapes`` (``{"x": [1, 3, 224, 224]}``), ``samples``, ``seed``, ``value_range``, ``warmup``,
    ``runs``, ``thresholds`` (``{"max_abs": 1e-3, "mobile/tflite-fp16": {"max_abs": 5e-3}}``), ``gate``,
    ``timeout``, ``convert_timeout``, ``memory_limit_mb``, ``time_budget``, ``jobs``, ``cache_dir``,
    ``use_cache``. ``record_history=True`` also records the check in the history database.

    Returns the Report (``report.passed``; ``report.targets``); raises ``portability.core.errors.UsageError``
    for a bad model, inputs or options. Never prints."""
    from portability.engine.pipeline import check as run_check

    report = run_check(Path(model), options(targets, dataset=dataset, **opts))
    if record_history:
        from portability.report.history import History

        with History() as h:
            h.record(report)
    return report
