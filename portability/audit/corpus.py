"""The models of an audit: a folder's model files or a manifest's [[model]] entries, each an :class:`Item`
with its settings, and the :class:`State` folder that keeps each finished result."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from portability.core.errors import UsageError
from portability.settings.options import relative_paths

STATE = ".portability-audit"


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
    #: a conformance case converted down to the versions the reference reads, or one it still cannot read
    versions: dict | None = None

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


def items(spec: Path) -> tuple[list[Item], dict, Path]:
    """(the models, the audit's default settings, the folder its state lives in) of a folder or manifest."""
    spec = Path(spec)
    if spec.is_dir():
        from portability.sources import models_in

        found = models_in(spec)  # the entries a source claims: each source says which are its own
        if not found:
            raise UsageError(f"{spec} holds no model (ONNX, .keras, .pt2, .tflite, SavedModel or TF.js folders, "
                             "MXNet checkpoints)")
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
