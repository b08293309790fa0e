"""Sources: a model as its owner has it. One module per kind, each with ``FORMAT`` (its node in the
converter graph), ``REFERENCE`` (the target id of its own runtime, the check's reference), ``claims(path)``
(whether a file or folder is of its kind: names and a few bytes only, no framework), ``load(path) ->
ModelInfo`` (signature, size, digest; run in an isolated child process) and, where its framework can
compute gradients, ``Gradients`` (the adversarial crafting's adapter) with ``GRADIENTS`` (the framework it
needs). Adding a source is its module and one line in ``SOURCES``.

Detection (``detect``) asks the modules in ``SOURCES`` order; ONNX, last, takes what no other claims. Files that would be
unpickled (``torch.save`` checkpoints, TorchScript archives, raw pickles, legacy Keras HDF5 files that
may carry marshalled Python code) are refused here with what to export instead.
"""
from __future__ import annotations

import json
import os
import zipfile
from importlib import import_module
from pathlib import Path
from typing import Any, Callable

from portability.core.errors import BadModel

#: kind -> the module that reads it (a literal registry: one entry per source kind), in the order
#: ``detect`` asks them (an MXNet ``-symbol.json`` before TF.js's ``.json``; ONNX takes the rest)
SOURCES = {
    "saved_model": "portability.sources.saved_model",
    "mxnet": "portability.sources.mxnet",
    "tfjs": "portability.sources.tfjs",
    "keras": "portability.sources.keras",
    "tflite": "portability.sources.tflite",
    "torch": "portability.sources.torch_export",
    "onnx": "portability.sources.onnx",
}

_PICKLE_TORCH = ("torch.save checkpoints and TorchScript archives are pickles (loading one runs code): "
                 "refused. Export the model with torch.export.export(model, example_inputs) and "
                 "torch.export.save(program, 'model.pt2'), or give an ONNX file")
_REFUSED = {
    ".pt": _PICKLE_TORCH, ".pth": _PICKLE_TORCH, ".ckpt": _PICKLE_TORCH, ".pkl": "a pickle (loading one runs code): refused",
    ".pickle": "a pickle (loading one runs code): refused", ".joblib": "a pickle (loading one runs code): refused",
    ".h5": "legacy Keras HDF5 files can carry marshalled Python code and are not loaded: save the model as "
           "a Keras 3 .keras file (model.save('model.keras')) or export a SavedModel",
    ".hdf5": "legacy Keras HDF5 files are not loaded: save the model as a .keras file",
    ".pb": "a lone .pb file: give the SavedModel folder (with saved_model.pb and variables/)",
}
#: files that no source claims, given by name all the same: the reader whose messages say what is wrong with
#: them (a TF.js model.json renamed); anything else goes to the ONNX loader
_UNCLAIMED = {".json": "tfjs"}


def detect(path: str | os.PathLike) -> str:
    """The source kind of ``path`` (BadModel for a refused or missing file). Anything unrecognised is
    handed to the ONNX loader, whose messages say what is wrong with it."""
    p = Path(path)
    if p.is_symlink():  # its folder would not be the one read: the sandbox and the checks confine to the link's
        raise BadModel(f"{p.name} is a symbolic link: refused (give the model itself, in its own folder)")
    if not p.exists():
        raise BadModel(f"model file not found: {p}")
    if p.is_dir():
        kind = claimed(p)
        if kind:
            return kind
        raise BadModel(f"{p} is a folder with neither saved_model.pb (a SavedModel), model.json (a TF.js "
                       "graph model) nor NAME-symbol.json (an MXNet checkpoint); give a model file or one of those folders")
    suffix = p.suffix.lower()
    if suffix in _REFUSED and p.name != "saved_model.pb":
        raise BadModel(f"{p.name}: {_REFUSED[suffix]}")
    kind = claimed(p)
    if kind and kind != "onnx":
        return kind
    if suffix in _UNCLAIMED:
        return _UNCLAIMED[suffix]
    _refuse_pickles(p)
    return "onnx"


def claimed(p: Path) -> str | None:
    """The kind whose module claims ``p`` (its ``claims``: names and a few bytes, no framework), asked in
    ``SOURCES`` order, or None."""
    from importlib import import_module

    return next((k for k in SOURCES if import_module(SOURCES[k]).claims(p)), None)


def models_in(folder: Path) -> list[Path]:
    """The models of ``folder``: its entries that a source claims (hidden entries and links aside), in name
    order. A model of several files is one entry: an MXNet checkpoint is its ``NAME-symbol.json`` (the
    ``.params`` beside it are claimed by none), a SavedModel or TF.js model its folder."""
    return sorted(p for p in Path(folder).iterdir()
                  if not p.name.startswith(".") and not p.is_symlink() and claimed(p) is not None)


def _refuse_pickles(p: Path) -> None:
    """A pickle under another name: a raw pickle stream, or a zip holding one (torch.save, TorchScript)."""
    try:
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError:
        return
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        raise BadModel(f"{p.name} is a pickle (loading one runs code): refused. {_PICKLE_TORCH.split(': refused. ')[1]}")
    if head[:2] == b"PK" and zipfile.is_zipfile(p):
        try:
            with zipfile.ZipFile(p) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
            return  # a damaged archive: the reader refuses it, saying what it is not
        if any(n.endswith(("data.pkl", "constants.pkl")) for n in names):
            raise BadModel(f"{p.name}: {_PICKLE_TORCH}")


def reference(kind: str) -> str:
    """The target whose runtime is the source's own (the check's reference): its module's ``REFERENCE``."""
    from importlib import import_module

    return import_module(SOURCES[kind]).REFERENCE


def first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def model_folder(path: str | os.PathLike) -> Path:
    """The folder a model's files live in: all that its readers and runtimes may read of it."""
    p = Path(path).resolve()
    return p if p.is_dir() else p.parent


def load_source_isolated(path: str | os.PathLike, timeout_s: float = 600, sandbox: str | None = None,
                         shapes: list[str] | None = None):
    """The source at ``path`` described (``ModelInfo``), read in a child process: a crafted file that
    crashes or hangs a framework's loader costs that child, not the run (the answer is a BadModel). The
    child runs in the OS sandbox (``core.sandbox``): it reads the model's folder, writes nothing but its
    own temporary folder, and has no network. ``shapes`` (``--shape``): what a source without input shapes
    (an MXNet checkpoint) needs to describe its inputs and outputs."""
    kind = detect(path)
    argv = ["-m", "portability.core.model"] if kind == "onnx" else ["-m", "portability.sources", kind]
    what = "validating" if kind == "onnx" else "reading"
    reads: tuple[str, ...] = ()
    if kind == "mxnet":
        from portability.core import mxnet_env

        argv, reads = argv[:3] + ["--shapes", json.dumps(list(shapes or []))], (str(mxnet_env.venv_dir()),)
    pool = getattr(import_module(SOURCES[kind]), "POOL", "") if kind in SOURCES else ""
    return _child(argv + [str(Path(path).absolute())], Path(path), timeout_s, sandbox, what, reads, pool)


#: a source's reader run by the check's worker pool (``workers.runner.prestart`` sets it, ``runner.run_module``):
#: (module argv, env, folder, the pool's flavour, timeout) -> its ``CompletedProcess``, or None where it cannot
_pool_run: Callable[..., Any] | None = None


def use_pool(run: Callable[..., Any] | None) -> None:
    """Readers run by ``run`` from now on, where it can (None: as fresh interpreters)."""
    global _pool_run
    _pool_run = run


def _child(argv: list[str], path: Path, timeout_s: float, sandbox: str, what: str, reads: tuple[str, ...] = (),
           pool: str = ""):
    import json
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile

    from portability.core import sandbox as sbx
    from portability.core.model import ModelInfo

    tmp = Path(tempfile.mkdtemp(prefix="portability-load-"))
    sb = sbx.Sandbox(mode=sandbox or sbx.default_mode(), read=(str(model_folder(path)), *reads), write=(str(tmp),))
    env = sbx.private_env(dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="-1"), tmp)
    try:
        p = None
        if _pool_run is not None and argv[0] == "-m":  # forked from the pool (of ``pool``: TensorFlow imported)
            p = _pool_run(sbx.module_argv(sb, argv[1:]), env, tmp, pool, timeout_s)
        if p is None:
            p = subprocess.run(sbx.command(sb, [sys.executable] + argv), capture_output=True, text=True,
                               timeout=timeout_s, stdin=subprocess.DEVNULL, env=env, cwd=tmp)
    except subprocess.TimeoutExpired:
        raise BadModel(f"{what} {path} took longer than {timeout_s:g} s: refused") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if p.returncode < 0:
        raise BadModel(f"{what} {path} crashed its loader ({signal.Signals(-p.returncode).name}): refused")
    if p.returncode == 70 and "sandbox could not be set up" in p.stderr:
        raise BadModel(p.stderr.strip().splitlines()[-1])
    try:
        answer = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BadModel(f"{what} {path} failed: {(p.stderr.strip().splitlines() or ['no answer'])[-1]}") from None
    if "error" in answer:
        raise BadModel(answer["error"])
    return ModelInfo.from_dict(answer)


__all__ = ["SOURCES", "detect", "claimed", "models_in", "reference", "load_source_isolated", "model_folder"]
