"""The environment of a child process that imports this ``portability``: a worker, the resident session."""
from __future__ import annotations

import os
import sys
from pathlib import Path


def worker_env() -> dict[str, str]:
    """A worker's environment: this process's, with this environment's tools first on PATH and this
    portability first on PYTHONPATH."""
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")  # console tools of this environment (onnxsim...)
    # the worker imports the same portability as this process, whatever is installed elsewhere
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env
