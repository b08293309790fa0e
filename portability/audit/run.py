"""``portability audit DIR|MANIFEST``: many models checked as ``check`` checks one, resumable.

A folder audits every model in it that a source claims (ONNX, ``.keras``, ``.pt2``, ``.tflite``, SavedModel
and TF.js folders, MXNet checkpoints) with the given settings; a manifest (TOML) lists models with their own settings::

    [defaults]            # any check setting: targets, thresholds, shapes, samples, ...
    targets = "server,web"
    [[model]]
    path = "models/lenet.onnx"      # relative to the manifest
    dataset = "data/digits.npz"
    [[model]]
    path = "models/detector.onnx"
    shapes = {images = [1, 3, 608, 800]}
    [[model]]
    path = "cases/conv/model.onnx"  # with the outputs it must give on its inputs: a second reference
    inputs = "cases/conv/inputs.npz"
    expected = "cases/conv/expected.npz"
    name = "conv_pads"              # what the scorecard calls it, and the op it tests (the ops table)
    op = "Conv"

Each model's result is written as it finishes, atomically, in the audit's state folder (``.portability-
audit/`` beside the folder or manifest): a rerun — after Ctrl-C, a kill or a crash — skips the models
already finished with the same settings, unless asked to check them again. The shared services (the
browsers, the ARM64 emulator) and the warm worker pool start once and serve every model.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable

from portability.audit.corpus import Item, State, items
from portability.audit.unit import ModelResult, check_one

log = logging.getLogger(__name__)


def _read(entry: dict | None) -> ModelResult | None:
    """A finished model from the audit's state (None where it holds none, or nothing readable)."""
    try:
        return ModelResult.from_dict(entry) if entry is not None else None
    except (KeyError, TypeError, ValueError) as e:
        log.warning("an audit state entry is not readable, the model is checked again: %s", e)
        return None


def run(spec: Path | None, flags: dict, rerun: bool = False,
        on_model: Callable[[int, int, Item, ModelResult | None], None] | None = None, executor: str = "local",
        address: str | None = None, workers: int = 1, corpus: tuple[list[Item], dict, Path] | None = None
        ) -> list[ModelResult]:
    """Every model of the audit, in order: finished ones from the state (unless ``rerun``), the others
    checked now, each written as it finishes. ``on_model(i, n, item, entry)``: before (entry None) and after.
    ``executor``: ``local`` (this process, one model at a time) or ``ray`` (``workers`` Ray actors, each
    with its own services and worker pool, on the cluster at ``address`` or a local instance); ``corpus``:
    the models, defaults and state folder of a built corpus instead of ``spec``'s."""
    from portability.core.sandbox import default_mode
    from portability.sources import model_folder

    models, base, folder = corpus if corpus is not None else items(spec)
    state = State(folder)
    merged = {**base, **{k: v for k, v in flags.items() if v is not None}}
    keys = [item.key(merged) for item in models]
    entries: list[ModelResult | None] = [None] * len(models)
    pending = []
    for i, item in enumerate(models):
        entry = None if rerun else _read(state.get(keys[i]))
        if entry is None:
            pending.append(i)
            continue
        entries[i] = replace(entry, resumed=True)
        if on_model:
            on_model(i, len(models), item, entries[i])

    def started(i: int) -> None:
        if on_model:
            on_model(i, len(models), models[i], None)

    def finished(i: int, entry: ModelResult) -> None:
        state.put(keys[i], entry.to_dict())
        entries[i] = entry
        if on_model:
            on_model(i, len(models), models[i], entry)

    mode = flags.get("sandbox") or base.get("sandbox") or default_mode()
    reads = tuple(sorted({str(model_folder(i.path)) for i in models}))
    if pending and executor == "ray":
        from portability.audit.ray_executor import run_ray

        run_ray([(i, models[i]) for i in pending], base, flags, mode, reads, started, finished, address, workers)
    elif pending:
        from portability.engine.session import Session

        with Session(mode, reads) as session:
            for i in pending:
                started(i)
                finished(i, check_one(models[i], base, flags, session))
    return [e for e in entries if e is not None]
