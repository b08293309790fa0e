"""Artifacts: a model in one format, as files in one folder (usually a cache entry)."""
from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

META_FILE = "artifact.json"


def is_meta(path: Path) -> bool:
    """Our record of an artifact (or one being written), not a file of it."""
    return path.name == META_FILE or path.name.startswith(f".{META_FILE}.")


@dataclass(frozen=True)
class Artifact:
    """One model in one format.

    ``path`` is the file a runtime opens (``model.onnx``, ``model.tflite``, ``model.json`` of a TF.js graph
    model); all files of the artifact live in ``path.parent`` (external data, weight shards). ``sha256``
    identifies the content (for the source model: the model file and its external data together).
    ``meta`` carries facts a converter recorded for the runtime (input/output name and layout mappings,
    quantization parameters, calibration source, converter messages) as plain JSON values.
    """

    path: Path
    format: str
    sha256: str
    meta: dict = field(default_factory=dict)
    #: ``size_info`` of its files, where it was measured when the artifact was made (a cache entry's)
    size: dict | None = None

    @property
    def folder(self) -> Path:
        return self.path.parent

    def files(self) -> list[Path]:
        """Every file of the artifact (for size): the folder's files, minus our metadata and the
        sub-folders ``meta["not_part"]`` names (by-products a converter keeps beside it)."""
        skip = [self.folder / d for d in self.meta.get("not_part", ())]
        return sorted(p for p in self.folder.rglob("*")
                      if p.is_file() and not is_meta(p) and not any(s in p.parents for s in skip))

    def to_dict(self) -> dict:
        d = {"path": str(self.path), "format": self.format, "sha256": self.sha256, "meta": self.meta}
        return {**d, "size": self.size} if self.size is not None else d

    @classmethod
    def from_dict(cls, d: dict) -> "Artifact":
        size = d.get("size")
        return cls(path=Path(d["path"]), format=d["format"], sha256=d["sha256"], meta=dict(d.get("meta") or {}),
                   size=dict(size) if isinstance(size, dict) else None)

    def size_info(self) -> dict:
        """Raw and gzip byte counts of its files (``size_info``): as measured when it was made, else now."""
        return dict(self.size) if self.size is not None else size_info(self.files())


def sha256_files(paths: list[Path]) -> str:
    """One digest over several files (names relative to the first file's folder, then contents)."""
    h = hashlib.sha256()
    base = paths[0].parent if paths else Path(".")
    for p in paths:
        h.update(os.path.relpath(p, base).encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def size_info(files: list[Path]) -> dict:
    """Raw and gzip (level 6, as a web server would send it) byte counts over the files."""
    raw = 0
    gz = 0
    for p in files:
        raw += p.stat().st_size
        comp = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: gzip container
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                gz += len(comp.compress(chunk))
        gz += len(comp.flush())
    return {"size_bytes": raw, "gzip_bytes": gz, "files": len(files)}


def write_meta(artifact: Artifact, folder: Path) -> None:
    """Record ``artifact`` (its path relative to ``folder``) in ``folder``, atomically (a reader of the folder
    finds the record before or after, never half of it)."""
    tmp = folder / f".{META_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(artifact.to_dict(), indent=1, sort_keys=True))
    os.replace(tmp, folder / META_FILE)


__all__ = ["Artifact", "sha256_files", "size_info", "write_meta"]


def artifact_notes(details: dict | None) -> tuple[str, ...]:
    """What a converter said about the artifact it made (``meta["notes"]``), for the target's notes."""
    notes = ((details or {}).get("artifact_meta") or {}).get("notes") or ()
    return tuple(str(n) for n in notes)
