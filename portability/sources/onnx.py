"""ONNX sources: the loader of ``portability.core.model`` (validation, external data confined to the
model's folder), referenced against ONNX Runtime."""
from __future__ import annotations

import os
from pathlib import Path

from portability.core.model import ModelInfo, load_model

FORMAT = "onnx"
REFERENCE = "server/ort-cpu"


def claims(p: Path) -> bool:
    """An ``.onnx`` file (``sources.detect`` also hands it any file no other source claims)."""
    return p.is_file() and p.suffix.lower() == ".onnx"


def load(path) -> ModelInfo:
    return load_model(path)


def load_model_isolated(path: str | os.PathLike, timeout_s: float = 600, sandbox: str | None = None) -> ModelInfo:
    """``load_model`` in a child process, in the OS sandbox: a crafted file that crashes or hangs onnx's C++
    checker costs that child, not the run (the answer is then a BadModel, exit 2)."""
    from portability.sources import _child

    return _child(["-m", "portability.core.model", str(Path(path).absolute())], Path(path), timeout_s, sandbox, "validating")
