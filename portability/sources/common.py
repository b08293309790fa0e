"""What the source readers share: tensor specs from framework shapes, digests over a folder's files
(refusing links that leave it), the framework's version, the gradient adapters' common part."""
from __future__ import annotations

import os
from pathlib import Path

from portability.core.artifact import sha256_files
from portability.core.errors import BadModel
from portability.core.model import TensorSpec
from portability.core.sandbox import NO_ALLOWLISTS, debug_switches


def allowlists_on() -> bool:
    """Whether the sources' allow-lists vet a model before it loads: always, but under the sandbox's debug
    switch ``NO_ALLOWLISTS`` (``core/sandbox.py``: the OS sandbox alone remains, and the check says so)."""
    return NO_ALLOWLISTS not in debug_switches()


def spec(name: str, dtype: str, shape) -> TensorSpec:
    """A TensorSpec; a dim that is not a positive int is unknown (None)."""
    dims = tuple(int(d) if isinstance(d, int) and d > 0 else None for d in (shape or ()))
    return TensorSpec(str(name), str(dtype), dims)


def folder_files(folder: Path) -> list[Path]:
    """Every file under ``folder``, refused when a link resolves outside it."""
    base = folder.resolve()
    files = []
    for p in sorted(folder.rglob("*")):
        real = p.resolve()
        if real != base and base not in real.parents:
            raise BadModel(f"{p} resolves outside the model's folder (symlink?): refused")
        if p.is_file():
            files.append(p)
    return files


def digest(files: list[Path]) -> tuple[str, int]:
    return sha256_files(files), sum(f.stat().st_size for f in files)


def version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v

    try:
        return f"{dist} {v(dist)}"
    except PackageNotFoundError:
        return dist


def quiet_tf() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


class GradientAdapter:
    """The gradient adapter of the adversarial crafting (``metrics.robustness.adversarial``): the source's own
    framework computes class scores and the loss's gradient with respect to the inputs. Run in the
    sandboxed crafting child only. A source module's ``Gradients`` says its ``framework`` and runs its model
    (``forward``: the input tensors -> its output or outputs); ``scores`` and ``grads`` are its own."""

    framework = ""

    def forward(self, ts):
        raise NotImplementedError

    def _outs(self, ts) -> list:
        y = self.forward(ts)
        return list(y.values()) if isinstance(y, dict) else list(y) if isinstance(y, (list, tuple)) else [y]
