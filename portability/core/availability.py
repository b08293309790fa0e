"""Whether a runtime or converter can run here, decided by cheap checks (``find_spec``, file tests)."""
from __future__ import annotations

import functools

import importlib.util
from dataclasses import dataclass


#: the one command that installs each optional part, for every "missing" message: an extra of the wheel
#: (``[project.optional-dependencies]`` in pyproject.toml) or a ``portability setup`` subcommand
INSTALL = {
    "portability": "pip install --force-reinstall portability",
    "tensorflow": "pip install 'portability[tensorflow]'",
    "mobile": "pip install 'portability[mobile]'",
    # PyPI's torch wheels bring CUDA (GBs): the CPU build from PyTorch's index, then the extra
    "torch": "portability setup torch",
    "openvino": "pip install 'portability[openvino]'",
    "coreml": "pip install 'portability[coreml]'",
    "report": "pip install 'portability[report]'",
    "ray": "pip install 'portability[ray]'",
    # onnxruntime-gpu replaces onnxruntime (one import name): swapped in at the installed onnxruntime's version
    "gpu": "portability setup gpu",
    "onnx2tf": "portability setup mobile",
    "tfjs": "portability setup tfjs",
    "executorch": "portability setup executorch",
    "web": "portability setup web",
    "arm64": "portability setup arm64 --with-deps",
    "mxnet": "portability setup mxnet",
}


def install(part: str) -> str:
    """The command that installs ``part`` (a key of :data:`INSTALL`)."""
    return INSTALL[part]


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""
    hint: str | None = None


def modules_present(*modules: str, hint: str) -> Availability:
    """Availability from ``find_spec`` only: cheap, imports nothing."""
    for m in modules:
        if importlib.util.find_spec(m) is None:
            return Availability(False, f"Python package '{m}' is not installed", hint)
    return Availability(True)


@functools.lru_cache(maxsize=None)
def package_version(dist: str) -> str:
    """The installed version of ``dist`` or ``"absent"`` (read once per process: the pre-imported worker
    pool reads the known ones before it forks, so a worker's cache lookups read no package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "absent"


#: ``uses`` names (runtimes' and converters') that are not a Python distribution of the same name: the
#: distributions each is installed as (TensorFlow's CPU build first), none for the browser's (npm) packages
DISTS = {"tensorflow": ("tensorflow-cpu", "tensorflow"), "onnxruntime-web": (), "@tensorflow/tfjs": ()}


def dists(classes) -> tuple[str, ...]:
    """The Python distributions the runtime or converter ``classes`` declare they use (``uses``), in order,
    each once."""
    names = (n for c in classes for n in getattr(c, "uses", ()) or ())
    return tuple(dict.fromkeys(d for n in names for d in DISTS.get(n, (n,))))
