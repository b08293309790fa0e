"""The model zoo from the study's side: which frameworks can train here, and training (cached).

Training runs ``python -m models.<framework>.train`` (contract: ``models/common.py``) as a subprocess:
PyTorch and Keras in this environment, MXNet in its own (``portability setup mxnet``). A trained model
is cached by (framework, architecture, dataset, profile, seed) and a digest of the zoo's code for that
framework, so a second study trains nothing and an edited definition trains again.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from portability.core.availability import install
from portability.core.errors import UsageError

#: each framework's model file, as ``check`` reads it
MODEL_FILES = {"torch": "model.pt2", "keras": "model.keras", "mxnet": "model.onnx"}


def zoo_root() -> Path:
    """The ``models/`` folder: ``$PORTABILITY_MODELS_DIR``, else the one beside this package (a source
    checkout; the zoo is not part of the installed package)."""
    env = os.environ.get("PORTABILITY_MODELS_DIR")
    root = Path(env) if env else Path(__file__).resolve().parents[2] / "models"
    if not (root / "spec.py").is_file():
        raise UsageError(f"the study's model zoo is not at {root}: run the study from a source checkout, or set PORTABILITY_MODELS_DIR")
    return root


def spec():
    """``models.spec`` (plain Python) loaded from the zoo."""
    import importlib

    root = str(zoo_root().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module("models.spec")


def python_for(framework: str) -> tuple[list[str] | None, str | None]:
    """(argv prefix of the Python that trains ``framework``, or None and why it cannot run here)."""
    if framework == "mxnet":
        from portability.core import mxnet_env

        ok, why = mxnet_env.status()
        return ([str(mxnet_env.python())], None) if ok else (None, why)
    mod = {"torch": "torch", "keras": "keras"}[framework]
    import importlib.util

    if importlib.util.find_spec(mod) is None:
        return None, f"{mod} is not installed ({install('torch' if mod == 'torch' else 'tensorflow')})"
    return [sys.executable], None


def code_digest(framework: str) -> str:
    """A digest of the zoo code that defines and trains ``framework``'s models."""
    root = zoo_root()
    h = hashlib.sha256()
    for p in sorted([root / "spec.py", root / "common.py", *(root / framework).glob("*.py")]):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class Trained:
    framework: str
    arch: str
    dataset: str
    dir: Path
    meta: dict
    cached: bool

    @property
    def model(self) -> Path:
        return self.dir / MODEL_FILES[self.framework]

    @property
    def eval_data(self) -> Path:
        return self.dir / "eval.npz"

    @property
    def exported(self) -> bool:
        return self.meta.get("export", {}).get("status") == "ok" and self.model.exists()


class TrainingFailed(RuntimeError):
    pass


def _sweep(out: Path) -> None:
    """Remove what trainings of ``out`` left half-done when their study was killed (``out.tmp<pid>`` of a
    process that is gone)."""
    for stale in out.parent.glob(out.name + ".tmp*"):
        pid = stale.name.rsplit(".tmp", 1)[1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except PermissionError:  # alive, someone else's
            pass


def train(framework: str, arch: str, dataset: str, data_npz: Path, profile: str, seed: int, cache: Path,
          on_event: Callable[[dict], None] = lambda e: None, retrain: bool = False, timeout_s: float = 7200,
          weights_from: Path | None = None) -> Trained:
    """The trained model (from the cache when it is there). Raises TrainingFailed with the last lines of
    the trainer's output when training itself fails (an export that fails is a result, in meta).
    ``weights_from``: train nothing, load these PyTorch weights (``weights.npz``) into ``framework``'s
    definition (the same-weights experiment); cached by the weights' digest."""
    argv, why = python_for(framework)
    if argv is None:
        raise TrainingFailed(why)
    if weights_from is not None and not Path(weights_from).is_file():
        raise TrainingFailed(f"no weights to load: {weights_from} (the PyTorch model was trained before weights were kept: --retrain)")
    wkey = f"-w{hashlib.sha256(Path(weights_from).read_bytes()).hexdigest()[:12]}" if weights_from else ""
    key = f"{framework}-{arch}-{dataset}-{profile}-s{seed}{wkey}-{code_digest(framework)}"
    out = cache / "models" / key
    meta_path = out / "meta.json"
    if meta_path.is_file() and not retrain:
        return Trained(framework, arch, dataset, out, json.loads(meta_path.read_text()), cached=True)
    _sweep(out)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(zoo_root().parent), PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONWARNINGS="ignore")
    cmd = argv + ["-m", f"models.{framework}.train", "--arch", arch, "--data", str(data_npz), "--dataset", dataset,
                  "--profile", profile, "--seed", str(seed), "--out", str(tmp)] + \
        (["--weights-from", str(Path(weights_from).resolve())] if weights_from else [])
    t0, tail = time.perf_counter(), []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=str(tmp), start_new_session=True)
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("{"):
                try:
                    on_event(json.loads(line))
                    continue
                except ValueError:
                    pass
            tail = (tail + [line])[-20:]
            if time.perf_counter() - t0 > timeout_s:
                proc.kill()
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    if rc != 0 or not (tmp / "meta.json").is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        last = next((t for t in reversed(tail) if t.strip()), "no output")
        raise TrainingFailed(f"training exited {rc}: {last.strip()[:300]}")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return Trained(framework, arch, dataset, out, json.loads(meta_path.read_text()), cached=False)
