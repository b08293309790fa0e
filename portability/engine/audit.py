"""``portability audit DIR|MANIFEST``: many models checked as ``check`` checks one, resumable.

A folder audits every model file in it (ONNX, ``.keras``, ``.pt2``, ``.tflite``, SavedModel and TF.js
folders) with the given settings; a manifest (TOML) lists models with their own settings::

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

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from portability.core.errors import UsageError
from portability.engine.options import relative_paths

log = logging.getLogger(__name__)

STATE = ".portability-audit"
#: model files and folders an audit of a folder picks up
SUFFIXES = (".onnx", ".keras", ".pt2", ".tflite")


@dataclass(frozen=True)
class Item:
    """One model of an audit and its settings (a layer over the audit's own). ``expected``: a ``.npz`` of
    the outputs the model must give on its ``inputs`` (a conformance case's), compared as a second
    reference; ``name`` and ``op``: what the scorecard calls it and the op it tests."""

    path: Path
    settings: dict = field(default_factory=dict)
    expected: Path | None = None
    name: str | None = None
    op: str | None = None
    tolerance: tuple[float, float] | None = None  # (rtol, atol) the case's own

    def key(self, base: dict) -> str:
        """What identifies a finished result: the model's path and file digest, and the settings."""
        from portability.core.artifact import sha256_files

        files = sorted(p for p in self.path.rglob("*") if p.is_file()) if self.path.is_dir() else [self.path]
        if self.expected is not None:
            files.append(Path(self.expected))
        doc = {"path": str(self.path.resolve()), "sha256": sha256_files(files) if files else "",
               "settings": {**base, **self.settings}}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:24]

    def label(self) -> str:
        return self.name or self.path.name


def _is_model(p: Path) -> bool:
    if p.is_dir():
        return (p / "saved_model.pb").is_file() or (p / "model.json").is_file()
    return p.suffix.lower() in SUFFIXES


def items(spec: Path) -> tuple[list[Item], dict, Path]:
    """(the models, the audit's default settings, the folder its state lives in) of a folder or manifest."""
    spec = Path(spec)
    if spec.is_dir():
        found = sorted(p for p in spec.iterdir() if not p.name.startswith(".") and _is_model(p) and not p.is_symlink())
        if not found:
            raise UsageError(f"{spec} holds no model (ONNX, .keras, .pt2, .tflite, SavedModel or TF.js folders)")
        return [Item(p) for p in found], {}, spec
    if not spec.is_file():
        raise UsageError(f"audit: {spec} is neither a folder of models nor a manifest file")
    import tomllib

    try:
        doc = tomllib.loads(spec.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{spec} is not a TOML manifest: {e}") from None
    models = doc.get("model") or []
    if not isinstance(models, list) or not models:
        raise UsageError(f"{spec} lists no [[model]] (each with a path)")
    out = []
    for i, m in enumerate(models):
        if not isinstance(m, dict) or not m.get("path"):
            raise UsageError(f"{spec}: [[model]] number {i + 1} has no path")
        settings = relative_paths({k: v for k, v in m.items() if k not in ("path", "expected", "name", "op", "tolerance")},
                                  spec.parent)
        expected = (spec.parent / m["expected"]).resolve() if m.get("expected") else None
        if expected is not None and not expected.is_file():
            raise UsageError(f"{spec}: [[model]] number {i + 1}: expected = {m['expected']} is not a file")
        tol = m.get("tolerance")
        out.append(Item((spec.parent / m["path"]).resolve(), settings, expected=expected, name=m.get("name"),
                        op=m.get("op"), tolerance=(float(tol[0]), float(tol[1])) if tol else None))
    return out, relative_paths(dict(doc.get("defaults") or {}), spec.parent), spec.parent


class State:
    """The audit's finished results: one JSON file per model, written atomically."""

    def __init__(self, folder: Path):
        self.folder = Path(folder) / STATE

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict | None:
        try:
            return json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, entry: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", dir=self.folder)
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f)
        os.replace(tmp, self.path(key))


def check_one(item: Item, base: dict, flags: dict, session=None) -> dict:
    """One model checked as ``check`` would; an entry of the audit (never raises for the model's sake): the
    model's status, its targets as the JSON report has them, and the whole report (``report``, for its own
    page). A conformance case's targets each get ``spec``: their outputs against the case's expected ones."""
    from portability.engine.options import resolve
    from portability.engine.pipeline import check as run_check
    from portability.report.files import to_json

    head = {"path": str(item.path), **({"name": item.name} if item.name else {}), **({"op": item.op} if item.op else {})}
    kept: dict = {}
    try:
        opts = resolve(base, item.settings, flags)
        report = run_check(item.path, opts, session=session, kept=kept if item.expected else None)
    except UsageError as e:  # a bad model or bad settings: this model's result, not the audit's end
        return {**head, "status": "error", "error": str(e), "targets": []}
    d = json.loads(to_json(report))
    if item.expected is not None:
        from portability.engine.conformance import against_spec

        against_spec(d["targets"], kept.get("outputs") or {}, Path(item.expected), item.tolerance)
    return {**head, "status": "passed" if report.passed else "failed", "error": None,
            "targets": d["targets"], "model": d["model"], "reference": d["reference"], "report": d}


def run(spec: Path | None, flags: dict, rerun: bool = False,
        on_model: Callable[[int, int, Item, dict | None], None] | None = None, executor: str = "local",
        address: str | None = None, workers: int = 1, corpus: tuple[list[Item], dict, Path] | None = None
        ) -> list[dict]:
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
    entries: list[dict | None] = [None] * len(models)
    pending = []
    for i, item in enumerate(models):
        entry = None if rerun else state.get(keys[i])
        if entry is None:
            pending.append(i)
            continue
        entries[i] = dict(entry, resumed=True)
        if on_model:
            on_model(i, len(models), item, entries[i])

    def started(i: int) -> None:
        if on_model:
            on_model(i, len(models), models[i], None)

    def finished(i: int, entry: dict) -> None:
        state.put(keys[i], entry)
        entries[i] = entry
        if on_model:
            on_model(i, len(models), models[i], entry)

    mode = flags.get("sandbox") or base.get("sandbox") or default_mode()
    reads = tuple(sorted({str(model_folder(i.path)) for i in models}))
    if pending and executor == "ray":
        from portability.engine.audit_ray import run_ray

        run_ray([(i, models[i]) for i in pending], base, flags, mode, reads, started, finished, address, workers)
    elif pending:
        from portability.engine.session import Session

        with Session(mode, reads) as session:
            for i in pending:
                started(i)
                finished(i, check_one(models[i], base, flags, session))
    return [e for e in entries if e is not None]
