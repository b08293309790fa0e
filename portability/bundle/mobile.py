"""``portability bundle MODEL --targets mobile -o DIR``: a folder that runs the mobile targets on a device
(a Raspberry Pi, a Jetson, a phone's Termux) with Python, numpy and the runtimes' own wheels.

A normal check of the model (the reference and the mobile targets) converts each target's model into the
artifact cache and keeps the reference's outputs. The folder then holds:

    run.py                  the runner (``bundle/runner/run.py``): runs each target whose runtime is
                            installed, compares, times, names the device and writes ``result.json``
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
from portability.core.errors import UsageError

RUNNER = Path(__file__).resolve().parent / "runner" / "run.py"
RESULT_KIND = "portability-mobile-result"
#: the mobile targets a bundle can run, by the runtime its runner uses
RUNNABLE = {"mobile/tflite-fp32": "litert", "mobile/tflite-fp16": "litert", "mobile/tflite-dynint8": "litert",
            "mobile/tflite-int8": "litert", "mobile/ort-mobile": "ort"}


def _litert(art, ref: dict, batches: list[dict], options: dict) -> tuple[dict, dict]:
    """A LiteRT target's tensors (interpreter indices, the file's layout) and its arrays."""
    from portability.core.protocol import IoMap
    from portability.runtimes.litert import KERNELS, batches as split, from_tflite, tflite_io, to_tflite

    io = tflite_io(art)
    kernels = options.get("kernels", "xnnpack")
    if kernels not in KERNELS:
        raise UsageError(f"unknown LiteRT kernels {kernels!r}")
    arrays: dict[str, np.ndarray] = {}
    calls = []
    for b, feeds in enumerate(batches):
        row = []
        for s, part in enumerate(split(io, to_tflite(io, feeds))):
            row.append([f"feed_{b}_{s}_{i}" for i in range(len(part))])
            arrays.update(zip(row[-1], part))
        calls.append(row)
    outputs = []
    for j, e in enumerate(io.outputs):
        inv = np.argsort(e.perm) if e.perm is not None else None
        keys = []
        for b in range(len(batches)):
            r = np.asarray(ref[e.onnx][b])
            arrays[f"ref_{b}_{j}"] = np.ascontiguousarray(r.transpose(inv) if inv is not None else r)
            keys.append(f"ref_{b}_{j}")
            if not e.quant:  # the file's layout maps back to the reference exactly as the check maps outputs
                back = from_tflite(IoMap((), (e,)), [arrays[keys[-1]]], {})[e.onnx]
                if not np.array_equal(back.astype(r.dtype), r):
                    raise UsageError(f"output '{e.onnx}': the file's layout of the reference does not map back to it")
        outputs.append({"onnx": e.onnx, "index": e.index, "tensor": e.tensor, "quant": e.quant, "ref": keys})
    tensors = {"inputs": [{"index": e.index, "tensor": e.tensor, "onnx": e.onnx, "dtype": e.dtype} for e in io.inputs],
               "outputs": outputs, "calls": calls, "kernels": kernels}
    return tensors, arrays


def _ort(ref: dict, batches: list[dict], outputs: list[str]) -> tuple[dict, dict]:
    """An ORT Mobile target's tensors (ONNX names, ONNX layout) and its arrays."""
    names = list(batches[0]) if batches else []
    arrays: dict[str, np.ndarray] = {}
    calls = []
    for b, feeds in enumerate(batches):
        keys = [f"feed_{b}_0_{i}" for i in range(len(names))]
        arrays.update({k: np.ascontiguousarray(feeds[n]) for k, n in zip(keys, names)})
        calls.append([keys])
    outs = []
    for j, name in enumerate(outputs):
        keys = [f"ref_{b}_{j}" for b in range(len(batches))]
        arrays.update({k: np.ascontiguousarray(ref[name][b]) for b, k in enumerate(keys)})
        outs.append({"onnx": name, "name": name, "quant": None, "ref": keys})
    return {"inputs": [{"name": n, "onnx": n} for n in names], "outputs": outs, "calls": calls}, arrays


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
    runtime = RUNNABLE[target.id]
    name = slug(target.id)
    model = f"models/{name}{art.path.suffix}"
    shutil.copy2(art.path, folder / model)
    if runtime == "litert":
        tensors, arrays = _litert(art, c.ref, c.batches, dict(target.options))
    else:
        tensors, arrays = _ort(c.ref, c.batches, [o["name"] for o in c.report.model.get("outputs") or []] or list(c.ref))
    for o in tensors["outputs"]:
        o["ref_max_abs"], o["size"] = _reference_stats(c.ref, o["onnx"])
    np.savez(folder / "data" / f"{name}.npz", **arrays)
    t = result.thresholds or {}
    return {"id": target.id, "slug": name, "runtime": runtime, "model": model, "data": f"data/{name}.npz",
            "threads": target.options.get("threads"), **tensors,
            "thresholds": {"max_abs": t.get("max_abs"), "cosine": t.get("cosine")},
            "timing": {"warmup": WARMUP_RUNS, "runs": TIMED_RUNS}, "check_status": str(result.status)}


def _runnable(targets: str) -> tuple[str, list[str]]:
    """The bundle's mobile target ids (as a ``--targets`` value) and the named ones it cannot run."""
    from portability.targets import expand

    ids = [t.id for t in expand(targets) if t.platform == "mobile"]
    if not ids:
        raise UsageError(f"--targets {targets} names no mobile target")
    keep = [i for i in ids if i in RUNNABLE]
    left = [f"{i} (a mobile bundle has no runner for it)" for i in ids if i not in RUNNABLE]
    if not keep:
        raise UsageError(f"--targets {targets} names no mobile target a bundle runs (those are {', '.join(RUNNABLE)})")
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
    shutil.copy2(RUNNER, folder / RUNNER.name)
    manifest = {"kind": "portability-mobile-bundle", "version": FORMAT_VERSION, "result_kind": RESULT_KIND,
                "model": {"name": Path(model).name, "sha256": c.report.model.get("sha256")},
                "inputs": {"digest": c.kept["inputs"]["digest"], "batches": c.feeds.batches},
                "reference": c.report.reference, "created_at": c.report.created_at, "targets": entries}
    write_manifest(folder, manifest)
    return Bundled(folder, manifest, c.report, tuple(skipped))
