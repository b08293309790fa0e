"""The worker pool's fork server (the *zygote*): ``python -m portability.workers.worker_zygote CONTROL_FD [LABEL]``.

It imports numpy and the worker's own modules once (``PRELOAD``), with no thread but its main one, then
serves requests from its parent (``workers/worker_pool.py``, which describes the protocol) on the control
socket: for each job it forks a child that turns into the worker a fresh
``python -m portability.workers.worker JOB`` would be (``_become_worker``), tells the parent the child's pid,
and, once it has reaped the child, its exit status.

Not imported here: TensorFlow, PyTorch, Keras, Playwright (heavy, and they start threads) and onnxruntime
(its import starts a thread) — except in the zygotes of the flavours that serve the workers importing them
(``FLAVOURS``). OpenBLAS starts its threads when numpy is imported: the zygote runs with ``OPENBLAS_NUM_THREADS=1``
and each worker sets the thread count a fresh interpreter would have chosen from the job's environment. Variables
read when an interpreter or a preloaded library starts (``PYTHON*``, ``LD_*``, ``LC_*``, ``HOME``, ``NPY_*``, the
other ``OPENBLAS_*``...) cannot change in a forked child: the parent starts a job whose environment differs from the
zygote's in one of them as a fresh interpreter (``startup_env``). No other module imported here reads the
environment at import time but TensorFlow, Keras and PyTorch, whose variables (and Keras's settings file)
``startup_env`` counts with those.

It stops on end of file on the control socket (its parent closed it, or died), when its parent process
changes (looked at every second) and on SIGTERM; stopping kills the process group of every worker it has.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from portability.converters.forked import COSMETIC, KERAS_HOME, READ_AT_IMPORT, keras_settings
from portability.core.blas import blas_threads, openblas as _openblas  # noqa: F401  (blas_threads: the tests read it here)

#: imported once in the zygote: numpy, the codec ``zipfile`` reads an ``.npz``'s member names with, what the worker
#: imports at module level and in ``run_job``, the browser driver of every web target's worker (the DevTools client,
#: the page server, the kept pages: the standard library's HTTP and e-mail modules, some 60 ms a worker), the engines'
#: runtimes and ONNX (the web page's warm-up model, OpenVINO's port names and the reference read it: 0.1-0.2 s a worker)
PRELOAD = ("numpy", "encodings.cp437", "onnx", "onnx.helper", "onnx.numpy_helper", "onnx.reference", "portability.core.protocol",
           "portability.workers.worker", "portability.workers.cache", "portability.converters.base",
           "portability.core.artifact", "portability.core.target", "portability.core.errors", "portability.runtimes.base",
           "portability.metrics.latency", "portability.runtimes.web", "portability.web.browser", "portability.web.server",
           "portability.web.pool", "portability.runtimes.ort_web", "portability.runtimes.tfjs",
           "portability.runtimes.litert_js", "portability.runtimes.ort", "portability.runtimes.litert")
#: never in the zygote: heavy, and they start threads (only the targets that need them import them)
NEVER = ("tensorflow", "torch", "keras", "playwright", "onnxruntime")
#: a second zygote for the workers that import TensorFlow (``server/tf``: 2.5-3.5 s of import each): the same
#: modules, TensorFlow (imported without the Keras optimizers it loads eagerly; ``runtimes/tf_savedmodel``), then
#: Keras 3 and tf-keras (onnx2tf's run imports both, as do the Keras reader, ``server/keras`` and Keras's export:
#: 1.5-2.5 s more); a third for those that import PyTorch (a ``.pt2``'s reader, ``server/torch``, its exports to
#: ONNX, ExecuTorch and Core ML: 2-2.5 s each): PyTorch and ONNX Script (its ONNX exporter's). None of those imports
#: starts a thread when OpenBLAS starts none; their thread pools are made on first use, in each worker. A fourth
#: for the TF.js converter's workers: TensorFlow and tf-keras imported without oneDNN's graph rewrites (``FLAVOUR_ENV``),
#: as the converter runs (``TfjsFromSavedModel``), so that it runs forked, not in a new interpreter
TENSORFLOW, TORCH, TFJS = "tensorflow", "torch", "tfjs"
FLAVOURS = ("", TENSORFLOW, TORCH, TFJS)
#: what each flavour imports beyond the plain zygote's modules, where installed
FLAVOUR_MODULES = {TENSORFLOW: ("tensorflow", "keras", "tf_keras"), TORCH: ("torch", "onnxscript"), TFJS: ("tensorflow", "tf_keras")}
#: what a flavour's zygote and each of its workers run with, whatever the check's environment says
FLAVOUR_ENV = {TFJS: {"TF_ENABLE_ONEDNN_OPTS": "0"}}
#: what TensorFlow and Keras (``converters.forked``), or PyTorch, read when imported (oneDNN's switch, the Keras
#: backend, PyTorch's allocator...): a job of that zygote that changes one needs a fresh interpreter...
_READ_AT_IMPORT = {TENSORFLOW: READ_AT_IMPORT, TORCH: ("TORCH_", "PYTORCH_"), TFJS: READ_AT_IMPORT}
#: ...except TensorFlow's logging's (what it prints, not what it computes)
TENSORFLOW_LOG_VARS = COSMETIC
#: variables read when an interpreter or a preloaded library starts (the interpreter's flags and sys.path, its
#: encodings, the dynamic loader, malloc, numpy, OpenBLAS): a job that changes one needs a fresh interpreter
STARTUP_PREFIXES = ("PYTHON", "LD_", "OPENBLAS_", "GOTO_", "OMP_", "MKL_", "NPY_", "NUMPY_", "MALLOC_", "GLIBC_", "LC_")
STARTUP_VARS = ("LANG", "HOME", "TZ")
#: ...except the BLAS thread counts, which every worker applies itself (see ``_blas_threads_for``)
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
#: the largest request (its environment, mostly) the zygote reads
MAX_REQUEST = 1 << 20


class PoolError(RuntimeError):
    """The zygote could not start, or stopped answering."""


# -- OpenBLAS's threads -----------------------------------------------------------------------------------

def _atoi(value: str | None) -> int:
    m = re.match(r"\s*([+-]?\d+)", value or "")
    return int(m.group(1)) if m else 0


def _blas_threads_for(env: dict[str, str]) -> int:
    """The thread count OpenBLAS chooses when it loads in a process with ``env``: OPENBLAS_NUM_THREADS,
    else GOTO_NUM_THREADS, else OMP_NUM_THREADS, else one per core; never more than the usable cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    n = _atoi(env.get("OPENBLAS_NUM_THREADS"))
    n = n if n > 0 else _atoi(env.get("GOTO_NUM_THREADS"))
    n = n if n > 0 else _atoi(env.get("OMP_NUM_THREADS"))
    return min(n, cores) if n > 0 else cores


def flavour_env(env: dict[str, str], flavour: str = "") -> dict[str, str]:  # as a zygote of ``flavour`` has it
    return {**env, **FLAVOUR_ENV.get(flavour, {})}


def startup_env(env: dict[str, str], flavour: str = "") -> dict[str, str]:
    """The part of ``env`` a worker forked from the zygote of ``flavour`` cannot change."""
    env = flavour_env(env, flavour)
    prefixes = STARTUP_PREFIXES + _READ_AT_IMPORT.get(flavour, ())
    keras = {"keras.json": keras_settings(env)} if flavour in (TENSORFLOW, TFJS) else {}
    return {k: v for k, v in env.items() if (k.startswith(prefixes) or k in STARTUP_VARS)
            and k not in BLAS_THREAD_VARS + TENSORFLOW_LOG_VARS + (KERAS_HOME,)} | keras


# -- the zygote -------------------------------------------------------------------------------------------

def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _preload(flavour: str = "") -> None:
    import importlib
    import importlib.util

    if flavour not in FLAVOURS:
        raise PoolError(f"no such worker pool: {flavour!r}")
    for name in PRELOAD:
        importlib.import_module(name)
    from portability.core.availability import package_version
    from portability.targets import used_dists

    for dist in used_dists():  # what names each converter (its cache key) and runtime, read once for every worker
        package_version(dist)
    from portability.metrics.latency import median_half_width

    median_half_width([1.0, 2.0, 3.0, 4.0, 5.0])  # numpy's first median sets itself up (some 15 ms a worker)
    if flavour in (TENSORFLOW, TFJS):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # as the runtime sets it before its import
        from portability.runtimes.tf_savedmodel import import_tensorflow_without_keras

        import_tensorflow_without_keras()
    for name in FLAVOUR_MODULES.get(flavour, ()):
        if name not in sys.modules and importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    loaded = [m for m in NEVER if m in sys.modules and m not in FLAVOUR_MODULES.get(flavour, ())]
    if loaded:
        raise PoolError(f"preloading imported {', '.join(loaded)}")
    if threading.active_count() != 1 or _threads() != 1:
        raise PoolError(f"preloading started threads ({_threads()} in all)")
    if _openblas() is None and _openblas_mapped():
        raise PoolError("numpy's OpenBLAS has no thread count functions to give each worker its own")


def _openblas_mapped() -> bool:
    try:
        with open("/proc/self/maps") as f:
            return any("openblas" in ln.lower() for ln in f)
    except OSError:
        return False


@dataclass
class _Request:
    """A job, as the forked child that runs it sees it."""

    job: str
    cwd: str
    env: dict[str, str]
    fds: tuple[int, int, int]  # stdin, stdout, stderr as received
    close: list = field(default_factory=list)  # the zygote's sockets and descriptors: not the worker's
    #: a module's command line (``[MODULE, ARGS...]``) the child runs as ``python -m`` would, instead of a job
    argv: list[str] | None = None


class _Server:
    def __init__(self, ctl: socket.socket):
        self.ctl = ctl
        self.parent = os.getppid()
        self.children: dict[int, socket.socket] = {}  # pid -> the connection its status goes to
        self.stop = False
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, *_):
        self.stop = True

    def serve(self) -> _Request | None:
        """Forks a worker for each request until told to stop; returns only in a forked child."""
        sel = self.sel
        sel.register(self.ctl, selectors.EVENT_READ)
        sel.register(self.wake_r, selectors.EVENT_READ)
        while not self.stop:
            for key, _ in sel.select(timeout=1.0):
                if key.fileobj is self.ctl:
                    req = self._request()
                    if req is not None:  # the child: none of the zygote's descriptors stays open in the worker
                        sel.close()
                        return req
                elif key.data is not None:
                    self._abandoned(key.fileobj, key.data)
                else:
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
            self._reap()
            if os.getppid() != self.parent:
                self.stop = True  # the parent died; the control socket may be held open by one of its children
        sel.close()
        self._stop_children()
        return None

    def _request(self) -> _Request | None:
        try:
            msg, fds, flags, _ = socket.recv_fds(self.ctl, MAX_REQUEST, 4, socket.MSG_CMSG_CLOEXEC)
        except OSError:
            msg, fds, flags = b"", [], 0
        if not msg:
            for fd in fds:
                os.close(fd)
            self.stop = True  # end of file: the parent closed the pool, or died
            return None
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            return None
        conn = socket.socket(fileno=fds[0])
        try:
            if flags & socket.MSG_TRUNC:
                raise PoolError("request too large")
            d = json.loads(msg)
            req = _Request(job=d["job"], cwd=d["cwd"], env=dict(d["env"]), fds=(fds[1], fds[2], fds[3]),
                           argv=[str(a) for a in d["argv"]] if d.get("argv") else None)
            if threading.active_count() != 1 or _threads() != 1:
                raise PoolError(f"the pool has {_threads()} threads: it forks only with one")
            for f in (sys.stdout, sys.stderr):
                f.flush()
            pid = os.fork()
        except Exception as e:
            _send(conn, {"error": f"{type(e).__name__}: {e}"})
            conn.close()
            for fd in fds[1:]:
                os.close(fd)
            return None
        if pid == 0:
            req.close = [self.ctl, conn, *self.children.values(), self.wake_r, self.wake_w]
            return req
        for fd in fds[1:]:  # the worker's ends: held by the worker only, so the parent sees it close them
            os.close(fd)
        self.children[pid] = conn
        _send(conn, {"pid": pid})
        self.sel.register(conn, selectors.EVENT_READ, pid)  # the parent says nothing more: readable is its end
        return None

    def _abandoned(self, conn: socket.socket, pid: int) -> None:
        """The parent that asked for this worker closed its connection, or died (a check killed with SIGKILL,
        whose workers this zygote forked for it): the worker has nobody to report to and is stopped."""
        try:
            said = conn.recv(1)
        except OSError:
            said = b""
        self._forget(conn)
        if not said and self.children.get(pid) is conn:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _forget(self, conn: socket.socket) -> None:
        try:
            self.sel.unregister(conn)
        except (KeyError, ValueError, RuntimeError, OSError):
            pass

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                self._forget(conn)
                # stopped with this zygote (its parent gone, or it was told to stop): the worker's parent says so
                _send(conn, {"returncode": os.waitstatus_to_exitcode(status), **({"pool_stopped": True} if self.stop else {})})
                conn.close()

    def _stop_children(self) -> None:
        for pid in list(self.children):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 10
        while self.children and time.monotonic() < deadline:
            self._reap()
            if self.children:
                time.sleep(0.05)


def _send(conn: socket.socket, msg: dict) -> None:
    try:
        conn.sendall(json.dumps(msg).encode() + b"\n")
    except OSError:
        pass  # the parent is gone or no longer listens


def _become_worker(req: _Request, start_cwd: str) -> int:
    """In the forked child: turn into the worker a fresh ``python -m portability.workers.worker JOB`` would be."""
    import atexit as _atexit
    import importlib

    os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for c in req.close:
        if isinstance(c, socket.socket):
            c.close()
        else:
            os.close(c)
    for target, fd in enumerate(req.fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(req.cwd)
    os.environ.clear()
    os.environ.update(req.env)
    if sys.path and sys.path[0] == start_cwd:  # ``-m`` put the start folder first, as it puts the job's
        sys.path[0] = os.getcwd()
    sys.argv = [sys.modules["portability.workers.worker"].__file__, req.job]
    importlib.invalidate_caches()
    tempfile.tempdir = None  # read from the job's TMPDIR again
    fns = _openblas()
    if fns is not None:
        fns[1](_blas_threads_for(req.env))
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()  # the legacy global generator, seeded in the zygote (random reseeds itself)
    _atexit._clear()  # the zygote's exit handlers are not the worker's
    if req.argv:  # a module's main, as ``python -m MODULE ARGS`` runs it (a source's reader), without an
        import runpy  # interpreter's teardown (TensorFlow's, in a fork, can crash it)

        sys.argv, code = list(req.argv), 0
        try:
            runpy.run_module(req.argv[0], run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code or 0 if isinstance(e.code, (int, type(None))) else 1
            if code == 1 and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 — as the interpreter would: its traceback, exit status 1
            import traceback

            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    from portability.workers import worker

    return worker.main([req.job])


def main(argv: list[str]) -> int:
    """The zygote: ``python -m portability.workers.worker_zygote CONTROL_FD [LABEL [FLAVOUR]]`` (LABEL: what it
    serves; FLAVOUR: ``FLAVOURS``)."""
    ctl = socket.socket(fileno=int(argv[0]))
    ctl.set_inheritable(False)
    start_cwd = os.getcwd()
    try:
        _preload(argv[2] if len(argv) > 2 else "")
    except Exception as e:
        _send_ctl(ctl, {"error": f"{type(e).__name__}: {e}"})
        return 1
    _send_ctl(ctl, {"ready": True, "pid": os.getpid()})
    req = _Server(ctl).serve()
    if req is None:  # stopped, its workers with it: nothing of its own to finish (an interpreter's teardown with
        sys.stderr.flush()  # TensorFlow loaded takes seconds)
        os._exit(0)
    return _become_worker(req, start_cwd)  # a worker: its exit is an interpreter's (exit handlers, threads joined)


def _send_ctl(ctl: socket.socket, msg: dict) -> None:
    with contextlib.suppress(OSError):
        ctl.send(json.dumps(msg).encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
