"""The Python API: ``portability.check(model, targets=..., dataset=..., **options) -> Report``.

The same pipeline as ``portability check`` (engine.pipeline.check, options resolved by
settings.options.resolve), without printing.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from portability.report.schema import Report

def options(targets: str | Sequence[str] = "server", *, dataset: str | os.PathLike | None = None,
            value_range: tuple[float, float] | None = None, **rest):
    """CheckOptions from keyword arguments, resolved like the command line's flags (one set of defaults:
    ``portability.settings.options``); an unknown name is a UsageError naming the known ones."""
    from portability.settings.options import resolve

    return resolve(dict(rest, targets=targets, dataset=dataset, input_range=value_range))


def check(model, targets: str | Sequence[str] = "server", dataset: str | os.PathLike | None = None,
          *, example_inputs=None, dynamic_shapes=None, record_history: bool = False, **opts) -> Report:
    """Convert ``model`` for each target, run it there, compare with the model's own runtime.

    ``model``: a model file or folder (ONNX, ``.keras``, SavedModel, ``.tflite``, TF.js ``model.json``,
    ``torch.export`` ``.pt2``), or a live ``torch.nn.Module`` (with ``example_inputs``: a tensor or a tuple,
    exported by ``torch.export``; ``dynamic_shapes``: its dims left dynamic, as ``torch.export.export`` takes
    them, e.g. a decoder's sequence and past lengths for ``generate``) or ``keras.Model`` (saved as ``.keras``).
    ``targets``: platforms or target ids, a comma-separated string or a list (``["web", "mobile/tflite-int8"]``).
    ``dataset``: an ``.npz`` with inputs ``x`` and integer labels ``y`` (adds accuracy). Other options: every
    setting of ``check`` by its name (``portability.settings.options.SETTINGS``, listed below), e.g. ``shapes``
    (``{"x": [1, 3, 224, 224]}``), ``thresholds`` (``{"max_abs": 1e-3, "mobile/tflite-fp16": {"max_abs":
    5e-3}}``), ``via`` (a format or converter every chain must pass: ``"onnx"``); ``value_range`` is
    ``input_range`` as a tuple. ``record_history=True`` also records the check in the history database.

    Returns the Report (``report.passed``; ``report.targets``); raises ``portability.core.errors.UsageError``
    for a bad model, inputs or options. Never prints."""
    import tempfile

    from portability.engine.grid import check as run_check  # one check, or one per --shape-grid shape
    from portability.sources import live

    settings = options(targets, dataset=dataset, **opts)
    with tempfile.TemporaryDirectory(prefix="portability-live-") as tmp:
        path = live.materialize(model, example_inputs, Path(tmp), dynamic_shapes) if live.kind(model) else Path(model)
        report = run_check(path, settings)
        if settings.localize:
            from portability.explain.localize import attach

            attach(report, path, settings)
        if settings.fix:
            from portability.explain import fix

            fix.attach(report, path, settings)
    if record_history:
        from portability.report.history import History

        with History() as h:
            h.record(report)
    return report


def _document() -> None:
    """List every setting, with its help, under ``check``'s docstring (the one declaration of them)."""
    from portability.settings.options import settings

    lines = [f"    ``{s.name}``: {s.help_text()}" for s in settings() if s.name not in ("targets", "dataset")]
    check.__doc__ = (check.__doc__ or "") + "\n\n    Settings:\n\n" + "\n".join(lines) + "\n"


_document()
