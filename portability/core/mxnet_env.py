"""MXNet's own Python environment: a virtual environment in the cache dir where the study's MXNet models
are trained and exported to ONNX (``python -m models.mxnet.train``).

MXNet 1.9.1 is retired upstream and cannot share the main stack: ``import mxnet`` fails on numpy >= 1.24
(it uses ``np.bool``; a ``np.bool = bool`` shim before the import fixes that on numpy 1.26, not on 2.x) and
its ONNX exporter breaks on onnx >= 1.19. So it lives in ``<cache>/mxnet-venv`` (or
``$PORTABILITY_MXNET_VENV``) with its own pins (:data:`PINS`, mirrored by ``requirements/mxnet.txt``), and
exchanges ONNX files with the main environment.

``provision()`` builds it once (``portability setup mxnet``); ``status()`` says whether it is usable
(file checks only); ``python()`` is its interpreter and ``env()`` the environment a training command
runs with. Importing this module imports nothing heavy.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

#: the pinned set proven together (one source of truth; ``requirements/mxnet.txt`` must say the same,
#: which tests/test_zoo_mxnet.py checks). onnxruntime 1.20 still ships numpy-1.x wheels: the exported
#: model is verified against MXNet inside the venv.
PINS = (
    "mxnet==1.9.1",
    "numpy==1.26.4",
    "onnx==1.18.0",
    "protobuf==5.29.5",
    "onnxruntime==1.20.1",
)
SETUP_HINT = "portability setup mxnet"
READY = "portability-ready.json"
REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements" / "mxnet.txt"

#: what every script run in the venv executes before ``import mxnet`` (numpy 1.24 removed ``np.bool``)
SHIM = "import numpy as np\nif not hasattr(np, 'bool') or np.bool is not bool:\n    np.bool = bool\n"
_PROBE = SHIM + (
    "import json, mxnet, onnx, onnxruntime\n"
    "from importlib.metadata import version as v\n"
    "import mxnet as mx\n"
    "assert hasattr(mx, 'onnx') and hasattr(mx.onnx, 'export_model'), 'mxnet has no ONNX exporter'\n"
    "x = mx.nd.array([[1.0, 2.0]]); assert float((x * 2).sum().asscalar()) == 6.0\n"
    "print(json.dumps({k: v(k) for k in ('mxnet', 'numpy', 'onnx', 'onnxruntime', 'protobuf')}))\n"
)


def venv_dir() -> Path:
    """``$PORTABILITY_MXNET_VENV``, else ``<cache>/mxnet-venv`` (cache: ``$PORTABILITY_CACHE_DIR`` or
    ``~/.cache/portability``)."""
    if os.environ.get("PORTABILITY_MXNET_VENV"):
        return Path(os.environ["PORTABILITY_MXNET_VENV"])
    from portability.core.dirs import default_root

    return default_root() / "mxnet-venv"


def python() -> Path:
    """The venv's interpreter (it may not exist yet: see :func:`status`)."""
    return venv_dir() / "bin" / "python"


def requirements() -> list[str]:
    """The pins to install: ``requirements/mxnet.txt`` in a source checkout, else :data:`PINS`."""
    if REQUIREMENTS.is_file():
        lines = [ln.split("#", 1)[0].strip() for ln in REQUIREMENTS.read_text().splitlines()]
        return [ln for ln in lines if ln]
    return list(PINS)


def _digest(pins: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(pins)).encode()).hexdigest()[:16]


def versions() -> dict[str, str]:
    ready = venv_dir() / READY
    try:
        return json.loads(ready.read_text()).get("versions", {})
    except (OSError, ValueError):
        return {}


def status() -> tuple[bool, str]:
    """(usable, reason). Cheap: file checks only (the import test ran when the stamp was written)."""
    d = venv_dir()
    fix = f"run: {SETUP_HINT}"
    if not python().exists():
        return False, f"MXNet's environment is not provisioned in {d} ({fix})"
    try:
        ready = json.loads((d / READY).read_text())
    except (OSError, ValueError):
        return False, f"MXNet's environment in {d} is incomplete: no successful import test recorded ({fix})"
    if ready.get("pins") != _digest(requirements()):
        return False, f"MXNet's environment in {d} was built from other pins than this portability's ({fix})"
    return True, "ready: " + ", ".join(f"{k} {v}" for k, v in ready.get("versions", {}).items())


def env(repo_root: Path | str | None = None) -> dict[str, str]:
    """The environment a command in the venv runs with: this process's, with ``PYTHONPATH`` set to the
    repository root (for ``models``) and nothing from the user's site-packages."""
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    if repo_root is not None:
        e["PYTHONPATH"] = str(repo_root)
    e["PYTHONNOUSERSITE"] = "1"
    return e


def _run(cmd: list[str], log: Callable[[str], None], timeout: float = 1800) -> str:
    log("$ " + " ".join(str(c) if len(str(c)) < 200 else "<script>" for c in cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                       timeout=timeout, env=env())
    if p.returncode != 0:
        tail = "\n".join(p.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"{Path(str(cmd[0])).name} failed (exit {p.returncode}):\n{tail}")
    return p.stdout


def provision(log: Callable[[str], None] = print, force: bool = False) -> Path:
    """Create the venv, install the pins, run the import test, write the stamp (idempotent; about a
    minute, once). Returns the venv's folder. Raises RuntimeError."""
    d = venv_dir()
    if not force and status()[0]:
        log(f"MXNet's environment already provisioned in {d}")
        return d
    pins = requirements()
    (d / READY).unlink(missing_ok=True)
    if force and d.exists():
        shutil.rmtree(d)
    if not python().exists():
        log(f"creating a virtual environment in {d}")
        d.parent.mkdir(parents=True, exist_ok=True)
        base = getattr(sys, "_base_executable", None) or sys.executable
        try:
            _run([base, "-m", "venv", str(d)], log)
        except RuntimeError as e:
            shutil.rmtree(d, ignore_errors=True)
            raise RuntimeError(f"{e}\n(on Debian/Ubuntu: apt-get install -y python3-venv)") from None
    log("installing " + ", ".join(pins))
    _run([str(python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
          "--only-binary=:all:", *pins], log)
    log("checking that mxnet, onnx and onnxruntime import")
    out = _run([str(python()), "-c", _PROBE], log, timeout=300)
    found = json.loads(out.strip().splitlines()[-1])
    (d / READY).write_text(json.dumps({"versions": found, "pins": _digest(pins), "requirements": pins}, indent=1))
    log("MXNet environment ready: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    return d
