"""``check --shape-grid NAME=DIMS,DIMS,...``: one check per shape, merged into one report.

The grid's lists are zipped: the i-th shape of every named input goes together. The first shape is the
conversion shape: its check converts every target there, as ``--shape`` does. Every further shape is a check of
its own whose converters get the first shape's static shapes (``CheckOptions.convert_shapes``, read by
``Runner.input_shapes``), so the artifact cache serves the same artifacts, while the feeds and the reference
run use the new shape. An artifact that cannot take it fails there, as its runtime says.

The merged report is the first shape's, plus every target of each further shape as ``TARGET~NAME=DIMS``
(gating as the target), and ``inputs.grid``: the shapes and, per target, its status at each. Where a converter
fixed a dynamic axis (a ``.tflite`` input without the model's dynamic dims), the target's rows say so.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from portability.core.errors import UsageError
from portability.report.schema import Report, TargetResult

#: between a target's id and the shape it ran at (``web/ort-wasm~input_ids=1x64``); brackets would read as markup
SEP = "~"


def parse(grid: list[str]) -> list[dict[str, str]]:
    """``["x=1x8,1x64", "m=1x8,1x64"]`` -> ``[{"x": "1x8", "m": "1x8"}, {"x": "1x64", "m": "1x64"}]``."""
    lists: dict[str, list[str]] = {}
    for item in grid:
        name, sep, dims = str(item).rpartition("=")
        shapes = [d.strip() for d in dims.split(",") if d.strip()]
        if not sep or not name or not shapes:
            raise UsageError(f"--shape-grid '{item}': give NAME=DIMS,DIMS,... (e.g. input_ids=1x8,1x64)")
        if name in lists:
            raise UsageError(f"--shape-grid names input '{name}' twice")
        lists[name] = shapes
    sizes = {n: len(v) for n, v in lists.items()}
    if len(set(sizes.values())) > 1:
        raise UsageError("--shape-grid: every input needs as many shapes (" +
                         ", ".join(f"{n} has {k}" for n, k in sizes.items()) + ")")
    count = next(iter(sizes.values()), 0)
    return [{n: v[i] for n, v in lists.items()} for i in range(count)]


def label(step: dict[str, str]) -> str:
    return ",".join(f"{n}={d}" for n, d in step.items())


def check(model_path: str | os.PathLike, opts, progress=None, model=None, kept: dict | None = None,
          session=None) -> Report:
    """``engine.pipeline.check``, once per shape of ``opts.shape_grid`` (once, without one), merged."""
    from portability.engine.pipeline import check as run_check

    if not opts.shape_grid:
        return run_check(model_path, opts, progress, model=model, kept=kept, session=session)
    if opts.inputs:
        raise UsageError("--shape-grid synthesizes its inputs at each shape: give it without --inputs")
    steps = parse(opts.shape_grid)
    say = getattr(progress, "note", None) or (lambda s: None)
    rest = [s for s in opts.shapes if s.rpartition("=")[0] not in steps[0]]
    reports: list[Report] = []
    convert, first = None, kept if kept is not None else {}
    with tempfile.TemporaryDirectory(prefix="portability-grid-") as tmp:
        calibration = Path(tmp) / "calibration.npz"  # the first shape's feeds: what its artifacts calibrated on
        for i, step in enumerate(steps):
            say(f"shape {i + 1}/{len(steps)}: {label(step)}" + (" (conversion shape)" if i == 0 else
                                                                 f" (artifacts converted at {label(steps[0])})"))
            o = replace(opts, shapes=rest + [f"{n}={d}" for n, d in step.items()], shape_grid=[], convert_shapes=convert,
                        calibration_feeds=str(calibration) if i else None)
            reports.append(run_check(model_path, o, progress, model=model, kept=first if i == 0 else None, session=session))
            if i == 0:
                convert = dict(reports[0].inputs.get("shapes") or {})
                np.savez(calibration, *first["feeds"].values(), names=np.array(list(first["feeds"])))  # names: any text
    return merge(reports, [label(s) for s in steps])


def fixed_axes(t: TargetResult, model: dict) -> list[str]:
    """The inputs whose dynamic dims the target's artifact fixed, each as a phrase ("the .tflite input x is
    [1, 4, 8], the model's [1, 'seq', 4]"). Read from a ``.tflite`` artifact's inputs
    (``details.artifact_meta.tflite_io``: the inputs' shape signatures, -1 where a dim stays dynamic)."""
    meta = (t.details or {}).get("artifact_meta") or ((t.artifact or {}).get("meta")) or {}
    io = meta.get("tflite_io") or {}
    specs = {s["name"]: s["shape"] for s in model.get("inputs") or []}
    out = []
    for e in io.get("inputs") or []:
        want = specs.get(e.get("onnx"))
        if want is None:
            continue
        dynamic = sum(not isinstance(d, int) or d < 0 for d in want)
        if dynamic and sum(int(d) < 0 for d in e.get("shape") or []) < dynamic:
            out.append(f"the .tflite input {e['onnx']} is {list(e['shape'])}, the model's {list(want)}")
    return out


def _marked(t: TargetResult, fixed: dict[str, list[str]], at: str, first: str, grid_label: str | None) -> TargetResult:
    """The target's row: renamed for a further shape, with the conversion shape and any fixed axis said."""
    base_id = t.id
    details = {**t.details, "grid": {"shape": at, "converted_at": first,
                                     **({"fixed": fixed[base_id]} if fixed.get(base_id) else {})}}
    notes = t.notes + ((f"converted at {first} (fixed: {'; '.join(fixed[base_id])})",) if fixed.get(base_id) else ())
    return replace(t, id=f"{t.id}{SEP}{grid_label}" if grid_label else t.id, details=details, notes=notes)


def merge(reports: list[Report], labels: list[str]) -> Report:
    """The first shape's report, plus every further shape's targets as ``TARGET~SHAPE`` and ``inputs.grid``."""
    base = reports[0]
    fixed = {t.id: fixed_axes(t, base.model) for t in base.targets}
    gating = {t.id: t.gating for t in base.targets}
    table: dict[str, dict] = {t.id: {lab: None for lab in labels} for t in base.targets}
    targets, notes = [], list(base.notes)
    for i, (rep, lab) in enumerate(zip(reports, labels)):
        for t in rep.targets:
            table.setdefault(t.id, {})[lab] = str(t.status)
            t = replace(t, gating=gating.get(t.id, t.gating))
            targets.append(_marked(t, fixed, lab, labels[0], lab if i else None))
        notes += [f"at {lab}: {n}" for n in rep.notes if i and n not in base.notes]
    fixed = {k: v for k, v in fixed.items() if v}
    notes.append(f"--shape-grid: every target converted at {labels[0]}, then run at "
                 f"{', '.join(labels[1:]) or 'no other shape'}")
    notes += [f"{tid}: converted at {labels[0]} (fixed: {'; '.join(f)})" for tid, f in fixed.items()]
    grid = {"shapes": labels, "converted_at": labels[0], "targets": table, "fixed": fixed}
    return replace(base, targets=tuple(targets), passed=all(not t.failed for t in targets if t.gating),
                   inputs={**base.inputs, "grid": grid}, notes=tuple(notes))
