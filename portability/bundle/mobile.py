"""``portability bundle MODEL --targets mobile -o DIR``: a folder that runs the mobile targets on a device
(a Raspberry Pi, a Jetson, a phone's Termux) with Python, numpy and the runtimes' own wheels.

A normal check of the model (the reference and the mobile targets) converts each target's model into the
artifact cache and keeps the reference's outputs. The folder then holds:

    run.py                  the runner (``bundle/runner/run.py``): runs each target whose runtime is
                            installed, compares, times, names the device and writes ``result.json``
    device_engines.py       the engines it runs the models with (``mobile/device_engines.py``, the
                            emulated ARM64 runtime's too), named by each target's runtime (``device_engine``)
    models/<slug>.<ext>     each target's model file (``.tflite`` for LiteRT, ``.ort`` for ORT Mobile)
    data/<slug>.npz         its feeds in the file's own layout (``to_tflite``: NHWC, quantized inputs,
                            the file's batch size) and the reference's outputs in that layout, per batch
                            (``np.load(..., allow_pickle=False)``)
    manifest.json           model name and sha256, inputs digest, reference id, per target its runtime,
                            tensors (TFLite indices or ONNX names), thresholds and timing plan

``result.json`` has the web bundle's result format (``bundle/ingest.py`` reads both); its targets are
ingested as ``mobile/<target>@<device>``.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from portability.bundle.web import (FORMAT_VERSION, TIMED_RUNS, WARMUP_RUNS, Bundled, _artifact, checked, not_run,
                                    slug, write_manifest)
from portability.core.errors import TargetError, UsageError
from portability.core.target import load_class

RUNNER = Path(__file__).resolve().parent / "runner" / "run.py"
#: the device engines the runner runs the models with (copied beside it)
ENGINES = Path(__file__).resolve().parents[1] / "mobile" / "device_engines.py"
RESULT_KIND = "portability-mobile-result"


def device_engine(target) -> str | None:
    """The engine a device runs ``target`` with (its runtime's ``device_engine``, a runtime that runs on the device
    itself: not under emulation), else None: a bundle cannot run it."""
    try:
        cls = load_class(target.runtime)
    except (ImportError, AttributeError):
        return None
    return None if cls.emulated else getattr(cls, "device_engine", None) or None


def _reference_stats(ref: dict, name: str) -> tuple[float, int]:
    """The reference's largest finite magnitude of one output over every batch, and its number of values."""
    parts = [np.asarray(x, dtype=np.float64).reshape(-1) for x in ref[name]]
    a = np.concatenate(parts) if parts else np.zeros(0)
    finite = a[np.isfinite(a)]
    return (float(np.abs(finite).max()) if finite.size else 0.0), int(a.size)


def _target(folder: Path, target, result, c) -> dict:
    """Copy one target's model file, write its arrays; its manifest entry."""
    art = _artifact(c.cache_root, result.artifact["sha256"], result.artifact["format"], (result.details or {}).get("artifact_meta"))
    if art is None:
        raise UsageError(f"{target.id}: its converted model is not in the artifact cache {c.cache_root}")
    name = slug(target.id)
    model = f"models/{name}{art.path.suffix}"
    shutil.copy2(art.path, folder / model)
    outputs = [o["name"] for o in c.report.model.get("outputs") or []] or list(c.ref)
    try:
        tensors, arrays = load_class(target.runtime).device_tensors(art, c.ref, c.batches, dict(target.options), outputs)
    except TargetError as e:
        raise UsageError(f"{target.id}: {e}") from None
    for o in tensors["outputs"]:
        o["ref_max_abs"], o["size"] = _reference_stats(c.ref, o["onnx"])
    np.savez(folder / "data" / f"{name}.npz", **arrays)
    t = result.thresholds or {}
    return {"id": target.id, "slug": name, "runtime": device_engine(target), "model": model, "data": f"data/{name}.npz",
            "threads": target.options.get("threads"), **tensors,
            "thresholds": {"max_abs": t.get("max_abs"), "cosine": t.get("cosine")},
            "timing": {"warmup": WARMUP_RUNS, "runs": TIMED_RUNS}, "check_status": str(result.status)}


def _runnable(targets: str) -> tuple[str, list[str]]:
    """The bundle's mobile target ids (as a ``--targets`` value) and the named ones it cannot run."""
    from portability.targets import expand

    chosen = [t for t in expand(targets) if t.platform == "mobile"]
    if not chosen:
        raise UsageError(f"--targets {targets} names no mobile target")
    keep = [t.id for t in chosen if device_engine(t)]
    left = [f"{t.id} (a mobile bundle has no runner for it)" for t in chosen if not device_engine(t)]
    if not keep:
        runnable = [t.id for t in expand("mobile") if t.platform == "mobile" and device_engine(t)]
        raise UsageError(f"--targets {targets} names no mobile target a bundle runs (those are {', '.join(runnable)})")
    return ",".join(keep), left


def build(model: Path, targets: str, folder: Path, **options: Any) -> Bundled:
    """Check ``model`` on its reference and the mobile ``targets`` a bundle can run, then write the bundle to
    ``folder`` (empty or absent). Targets that did not run to outputs here are left out (``skipped``)."""
    folder = Path(folder)
    spec, skipped = _runnable(targets)
    c = checked(model, spec, folder, "mobile", **options)
    for d in ("models", "data"):
        (folder / d).mkdir()
    entries = []
    for t in c.chosen:
        r = c.report.target(t.id)
        why = not_run(t.id, r)
        if why:
            skipped.append(why)
            continue
        entries.append(_target(folder, t, r, c))
    if not entries:
        raise UsageError("no mobile target ran here to outputs: nothing to bundle (" + "; ".join(skipped) + ")")
    for f in (RUNNER, ENGINES):
        shutil.copy2(f, folder / f.name)
    manifest = {"kind": "portability-mobile-bundle", "version": FORMAT_VERSION, "result_kind": RESULT_KIND,
                "model": {"name": Path(model).name, "sha256": c.report.model.get("sha256")},
                "inputs": {"digest": c.kept["inputs"]["digest"], "batches": c.feeds.batches},
                "reference": c.report.reference, "created_at": c.report.created_at, "targets": entries}
    write_manifest(folder, manifest)
    return Bundled(folder, manifest, c.report, tuple(skipped))
