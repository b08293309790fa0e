"""Workers started warm: a fork server that has already imported what every worker imports.

A check starts one server process (the *zygote*, ``workers/worker_zygote.py``) on its first worker and stops
it when it ends (:func:`shutdown`). The zygote imports numpy and the worker's own modules once, then waits
on a control socket. For each job it forks a child that becomes the worker: its own session (the parent
kills it as a tree with ``os.killpg``), the pipes and log file it was handed as stdin/stdout/stderr, the
job's folder as working directory, the job's environment as ``os.environ``, then
``portability.workers.worker.main``. Every job is still its own process; only the interpreter's start-up and
the imports are no longer paid per target.

Protocol (no pickle): the parent and the zygote share a ``SOCK_SEQPACKET`` socket pair. A request is one
JSON message ``{"job", "cwd", "env"}`` with four descriptors attached (``SCM_RIGHTS``): the request's own
connection (a stream socket pair, one end kept by the parent), the worker's stdin (read end), stdout (write
end) and log file. On that connection the zygote answers ``{"pid": N}`` (or ``{"error": ...}``) once it has
forked, and ``{"returncode": R}`` when it has reaped the worker (``-signal`` for a worker killed by a
signal, as :class:`subprocess.Popen` reports it). :class:`PooledProcess` is the parent's handle: what
``workers.runner`` uses of a ``Popen``.

Why a small server of our own rather than ``multiprocessing``'s forkserver: the worker must get exactly the
descriptors the runner made (pipes read with ``selectors``, the log file), a session of its own, the job's
environment and working directory, and an exit status with the signal that killed it; multiprocessing
pickles its calls, keeps pipes of its own to every child and reports no exit status to the caller.

The zygote never outlives its parent (it stops on end of file on the control socket, or when its parent
process changes) and kills the workers it still has when it stops. If it cannot start, or dies, workers start
as before (a fresh interpreter each, ``subprocess.Popen``) with a warning in the log;
``PORTABILITY_WORKER_POOL=0`` forces that.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from portability.workers.worker_zygote import PoolError, startup_env

log = logging.getLogger(__name__)

#: ``0`` starts every worker as a fresh interpreter (to compare, or to debug)
SWITCH = "PORTABILITY_WORKER_POOL"
#: how long the zygote may take to import its modules, and to answer a request with a pid
START_TIMEOUT_S = 60.0


def enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip() != "0"


class PooledProcess:
    """A worker forked by the zygote, with what ``workers.runner`` uses of :class:`subprocess.Popen`: ``pid``,
    ``stdin``, ``stdout``, ``poll()``, ``wait()``, ``returncode`` (negative: killed by that signal)."""

    def __init__(self, pid: int, conn: socket.socket, stdin, stdout, args: list[str], buffered: bytes = b""):
        self.pid, self.stdin, self.stdout, self.args = pid, stdin, stdout, args
        self.stderr = None
        self.returncode: int | None = None
        self._conn: socket.socket | None = conn
        self._buf = buffered  # what the zygote said after the pid, read with it
        self._lock = threading.Lock()
        with self._lock:
            self._parse()

    def __repr__(self) -> str:
        return f"<PooledProcess pid={self.pid} returncode={self.returncode}>"

    def _parse(self) -> None:
        while b"\n" in self._buf and self.returncode is None:
            line, self._buf = self._buf.split(b"\n", 1)
            rc = json.loads(line).get("returncode")
            if rc is not None:
                self.returncode = int(rc)
                self._conn.close()
                self._conn = None

    def _read(self, timeout: float | None) -> None:
        """Waits up to ``timeout`` for the zygote's word on this worker."""
        with self._lock:
            if self.returncode is not None or self._conn is None:
                return
            sel = selectors.DefaultSelector()
            try:
                sel.register(self._conn, selectors.EVENT_READ)
                if not sel.select(timeout):
                    return
                chunk = self._conn.recv(4096)
            except OSError:
                chunk = b""
            finally:
                sel.close()
            if not chunk:
                return self._lost()
            self._buf += chunk
            self._parse()

    def _lost(self) -> None:
        """The zygote stopped before this worker did (it kills its workers when it stops): from now on the
        worker is watched by its pid, and its exit status is unknown."""
        self._conn.close()
        self._conn = None
        log.warning("the worker pool stopped while worker %d ran: its exit status is lost", self.pid)

    def _gone(self) -> bool:
        import psutil

        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return True

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0)
            if self.returncode is None and self._conn is None and self._gone():
                self.returncode = 255
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            if self._conn is None:
                time.sleep(0.05 if left is None else min(0.05, left))
            else:  # short waits: a poll() from another thread is not held up long
                self._read(0.1 if left is None else min(0.1, left))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Zygote:
    """The parent's end of one zygote."""

    def __init__(self, env: dict[str, str], label: str = ""):
        self.startup = startup_env(env)
        self.lock = threading.Lock()
        self.closed = False
        self.errors = tempfile.TemporaryFile()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        zenv = dict(env, OPENBLAS_NUM_THREADS="1")  # numpy's import starts no thread; workers set their own
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "portability.workers.worker_zygote", str(theirs.fileno()), label],
                                         pass_fds=(theirs.fileno(),), env=zenv, cwd="/", stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=self.errors, start_new_session=True)
        except OSError as e:
            ours.close()
            raise PoolError(f"cannot start: {e}") from e
        finally:
            theirs.close()
        self.ctl = ours
        try:
            ours.settimeout(START_TIMEOUT_S)
            hello = ours.recv(65536)
            ours.settimeout(None)
            d = json.loads(hello) if hello else {"error": "it exited" + self._said()}
        except (OSError, ValueError) as e:
            d = {"error": f"no answer ({e})"}
        if not d.get("ready"):
            self.close(wait_s=0)
            raise PoolError(d.get("error") or "no answer")

    def _said(self) -> str:
        try:
            self.errors.seek(0)
            tail = [ln for ln in self.errors.read().decode(errors="replace").splitlines() if ln.strip()][-3:]
        except (OSError, ValueError):
            return ""
        return (": " + " | ".join(tail)) if tail else ""

    def spawn(self, job_file: Path, log_file: Path, env: dict[str, str]) -> PooledProcess | None:
        """The job's worker, forked; None when its environment needs a fresh interpreter."""
        if startup_env(env) != self.startup:
            return None
        errf = open(log_file, "wb")  # as with Popen: a log that cannot be written is the caller's error
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            msg = json.dumps({"job": str(job_file), "cwd": str(job_file.parent), "env": env}).encode()
            with self.lock:
                if self.closed:
                    raise PoolError("stopped")
                socket.send_fds(self.ctl, [msg], [theirs.fileno(), in_r, out_w, errf.fileno()])
        except (OSError, PoolError) as e:
            for fd in (in_w, out_r):
                os.close(fd)
            ours.close()
            raise PoolError(f"cannot send a job: {e}") from e
        finally:  # what the worker holds: once it is gone, the parent sees end of file on its pipes
            errf.close()
            theirs.close()
            for fd in (in_r, out_w):
                os.close(fd)
        answer = b""
        try:
            ours.settimeout(START_TIMEOUT_S)
            while b"\n" not in answer:
                chunk = ours.recv(4096)
                if not chunk:
                    break
                answer += chunk
            ours.settimeout(None)
            first, _, rest = answer.partition(b"\n")
            d = json.loads(first) if first else {"error": "the pool stopped" + self._said()}
        except (OSError, ValueError) as e:
            d = {"error": f"no answer ({e})"}
        if "pid" not in d:
            for fd in (in_w, out_r):
                os.close(fd)
            ours.close()
            raise PoolError(d.get("error") or "no answer")
        return PooledProcess(int(d["pid"]), ours, os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb"),
                             [sys.executable, "-m", "portability.workers.worker", str(job_file)], rest)

    def close(self, wait_s: float = 15) -> None:
        """Stops the zygote (and any worker it still has) and waits for it; killed after ``wait_s``."""
        with self.lock:
            self.closed = True
            try:
                self.ctl.close()  # end of file: it kills what it still runs and exits
            except OSError:
                pass
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        self.errors.close()


_lock = threading.Lock()
_zygote: _Zygote | None = None
#: the zygote could not start or died: workers start as fresh interpreters until :func:`shutdown`
_broken = False
_atexit_registered = False


def _started(env: dict[str, str], label: str) -> _Zygote | None:
    """The zygote, started now unless it runs (``_lock`` held); None when it cannot start."""
    global _zygote, _broken, _atexit_registered
    if _broken:
        return None
    if _zygote is None:
        t0 = time.monotonic()
        try:
            _zygote = _Zygote(env, label)
            log.debug("the worker pool started in %.2f s", time.monotonic() - t0)
        except PoolError as e:
            _broken = True
            log.warning("the worker pool did not start (%s): workers start as fresh processes", e)
            return None
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True
    return _zygote


def prestart(env: dict[str, str], label: str = "") -> threading.Thread | None:
    """Start the zygote in the background, in ``env`` (a worker's environment), while the check does other
    work (reads the model, plans the targets): its first worker then forks at once instead of waiting for
    the imports. A job whose environment needs another start is still a fresh interpreter (``spawn``).
    Returns the thread that starts it (None: the pool is off)."""
    if not enabled():
        return None

    def start() -> None:
        with _lock:
            _started(env, label)

    t = threading.Thread(target=start, name="worker pool start", daemon=True)
    t.start()
    return t


def spawn(job_file: Path, log_file: Path, env: dict[str, str]) -> PooledProcess | None:
    """The job's worker forked from the zygote (started on first use), or None: start it as a fresh
    interpreter (the pool is off, could not start, stopped, or the job's environment needs one)."""
    global _zygote, _broken
    if not enabled():
        return None
    t0 = time.monotonic()
    with _lock:
        z = _started(env, str(Path(job_file).parent.parent))
        log.debug("a worker waited %.2f s for the pool", time.monotonic() - t0)
        if z is None:
            return None
    try:
        return z.spawn(Path(job_file), Path(log_file), env)
    except PoolError as e:
        with _lock:
            if _zygote is z:
                _zygote, _broken = None, True
        if not z.closed:
            log.warning("the worker pool stopped (%s): workers start as fresh processes", e)
        z.close()
        return None


def pid() -> int | None:
    """The running zygote's pid (None: none runs)."""
    z = _zygote
    return z.proc.pid if z is not None else None


def shutdown() -> None:
    """Stops the zygote, if one runs (the end of a check, Ctrl-C, exit); the next worker starts a new one."""
    global _zygote, _broken
    with _lock:
        z, _zygote, _broken = _zygote, None, False
    if z is not None:
        z.close()

