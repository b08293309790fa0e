"""A converter's Python command line run in a fork of this worker, where TensorFlow is already imported.

onnx2tf, tf2onnx and onnx2tf 2.x are Python programs that import TensorFlow first (2.5-3.5 s each time). A
worker forked from the TensorFlow worker pool (``Converter.pool``) has imported it already: ``run_tool`` then
runs such a command line (``python -m MODULE ARGS`` or ``python -c CODE ARGS``) in a forked child of the worker
instead of a fresh interpreter. The child is what the fresh interpreter would be: in the worker's process group
(stopped with it), the command's folder and environment, ``sys.argv``, the module run as ``__main__``, stdout and stderr captured
together, the exit status of ``sys.exit``; it inherits the worker's OS sandbox, as a subprocess does.

Only where that is the same program: the worker has no thread but its main one and OpenBLAS's (a fork copies
one thread, and a lock another one held stays held; OpenBLAS stops its own threads around a fork), TensorFlow has
not started its runtime (its thread pools), the command's environment changes no ``TF_*`` or ``KERAS_*`` variable
TensorFlow or Keras read at its import (``TF_ENABLE_ONEDNN_OPTS``: the TF.js converter's run keeps its own
interpreter) nor Keras's settings, and no module the command's ``PYTHONPATH`` would give it is imported already. Otherwise ``run_tool`` starts the interpreter as before.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from portability.core.pipes import read_to_end

#: the variables TensorFlow and Keras read when they are imported (oneDNN's switch, the Keras backend...)
READ_AT_IMPORT = ("TF_", "KERAS_")
#: ...of which these are read by TensorFlow's logging only: a different value changes what it prints, not what it
#: computes
COSMETIC = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL")
#: Keras's folder, where it reads its settings (``keras.json``) at import: a sandboxed process gets an empty one of
#: its own (``core.sandbox.private_env``), so what matters is the settings, not the folder (``keras_settings``)
KERAS_HOME = "KERAS_HOME"
_KERAS_DEFAULTS = {"floatx": "float32", "epsilon": 1e-07, "backend": "tensorflow", "image_data_format": "channels_last"}


def keras_settings(env: dict[str, str]) -> str:
    """The settings Keras reads from its ``keras.json`` when imported in a process of ``env`` (``$KERAS_HOME``,
    else ``~/.keras``): its defaults where there is no such file, as JSON."""
    home = env.get(KERAS_HOME)
    if home is None:
        base = env.get("HOME") or os.path.expanduser("~")
        home = os.path.join(base if os.access(base, os.W_OK) else "/tmp", ".keras")
    try:
        with open(os.path.join(os.path.expanduser(home), "keras.json")) as f:
            found = json.load(f)
    except (OSError, ValueError):
        found = {}
    found = found if isinstance(found, dict) else {}
    read = {k: found[k] for k in (*_KERAS_DEFAULTS, "nnx_enabled") if k in found}  # the keys Keras reads
    return json.dumps({**_KERAS_DEFAULTS, **read}, sort_keys=True)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _own_threads() -> int:
    """The threads here besides the main one and OpenBLAS's (idle, and stopped by OpenBLAS's own fork handler)."""
    import threading

    from portability.core.blas import blas_threads

    return max(_threads() - max(blas_threads() or 1, 1), threading.active_count() - 1)


def _tensorflow_started() -> bool:
    """Whether TensorFlow's runtime exists in this process (its eager context made its thread pools)."""
    ctx_mod = sys.modules.get("tensorflow.python.eager.context")
    ctx = getattr(ctx_mod, "context_safe", lambda: None)() if ctx_mod else None
    return bool(ctx is not None and getattr(ctx, "_initialized", True))


def _shadowed(path: str) -> bool:
    """Whether a module a ``PYTHONPATH`` entry holds is imported here already (from elsewhere)."""
    for folder in filter(None, path.split(os.pathsep)):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            mod = name[:-3] if name.endswith(".py") else name
            if mod in sys.modules and not str(getattr(sys.modules[mod], "__file__", "") or "").startswith(folder):
                return True
    return False


def why_not(cmd: list[str], env: dict[str, str]) -> str | None:
    """Why ``cmd`` cannot run in a fork of this process (None: it can)."""
    if len(cmd) < 3 or cmd[0] != sys.executable or cmd[1] not in ("-m", "-c"):
        return "not a Python command line of this interpreter"
    if "tensorflow" not in sys.modules:
        return "TensorFlow is not imported here"
    if _own_threads():
        return f"{_own_threads()} threads besides the main one run here"
    if _tensorflow_started():
        return "TensorFlow's runtime is started here"
    changed = [k for k in set(env) | set(os.environ) if k.startswith(READ_AT_IMPORT)
               and k not in (*COSMETIC, KERAS_HOME) and env.get(k) != os.environ.get(k)]
    if "keras" in sys.modules and keras_settings(env) != keras_settings(dict(os.environ)):
        changed.append(f"{KERAS_HOME} (its keras.json)")
    if changed:
        return f"the command changes {', '.join(sorted(changed))}, which TensorFlow or Keras read at its import"
    if env.get("PYTHONPATH", "") != os.environ.get("PYTHONPATH", "") and _shadowed(env.get("PYTHONPATH", "")):
        return "a module its PYTHONPATH gives is imported here already"
    return None


def _child(cmd: list[str], cwd: str, env: dict[str, str], write_fd: int, read_fd: int) -> None:
    """In the forked child: become ``cmd`` and exit with its status (never returns)."""
    code = 1
    try:
        import atexit
        import runpy
        import traceback

        os.close(read_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        os.close(null)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[:1] = [os.getcwd()] if cmd[1] == "-m" else [""]  # what -m and -c put first
        sys.path[1:1] = extra
        atexit._clear()  # the worker's exit handlers are not the tool's
        try:
            if cmd[1] == "-m":
                sys.argv = [cmd[2], *cmd[3:]]
                runpy.run_module(cmd[2], run_name="__main__", alter_sys=True)
            else:
                sys.argv = ["-c", *cmd[3:]]
                exec(compile(cmd[2], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 — as an interpreter would: the traceback, exit status 1
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run(cmd: list[str], cwd: str, env: dict[str, str], timeout_s: float | None) -> subprocess.CompletedProcess:
    """``cmd`` run in a forked child (``why_not`` said it can): its output (stdout and stderr together) and exit
    status, as ``subprocess.run`` gives them. Past ``timeout_s`` it is killed with what it started and
    ``subprocess.TimeoutExpired`` raised."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(cmd, cwd, env, write_fd, read_fd)
    os.close(write_fd)
    try:
        out, late = read_to_end(read_fd, None if timeout_s is None else time.monotonic() + timeout_s)
    finally:
        os.close(read_fd)
    if late:
        _kill(pid)
        raise subprocess.TimeoutExpired(cmd, timeout_s, output=out)
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(cmd, os.waitstatus_to_exitcode(status), out.decode(errors="replace"), None)


def _kill(pid: int) -> None:
    """The tool and what it started (the worker's process group holds them: a worker stopped takes them too)."""
    import psutil

    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        procs = []
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
