"""The check's ends of its worker pool's zygotes (``workers/worker_pool.py`` describes the protocol): a zygote it
started (:class:`Zygote`), one the resident session runs (:class:`RemoteZygote`), and a worker either forked
(:class:`PooledProcess`, what ``workers.runner`` uses of a ``Popen``)."""
from __future__ import annotations

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

from portability.workers.worker_zygote import TFJS, PoolError, flavour_env, startup_env

log = logging.getLogger("portability.workers.worker_pool")

#: how long the zygote may take to import its modules, and to answer a request with a pid
START_TIMEOUT_S = 60.0


class PooledProcess:
    """A worker forked by the zygote, with what ``workers.runner`` uses of :class:`subprocess.Popen`: ``pid``,
    ``stdin``, ``stdout``, ``poll()``, ``wait()``, ``returncode`` (negative: killed by that signal)."""

    def __init__(self, pid: int, conn: socket.socket, stdin, stdout, args: list[str], buffered: bytes = b"",
                 owner: str = "the worker pool"):
        self.pid, self.stdin, self.stdout, self.args = pid, stdin, stdout, args
        self.stderr = None
        self.returncode: int | None = None
        self._conn: socket.socket | None = conn
        self._buf = buffered  # what the zygote said after the pid, read with it
        #: the zygote that forked it stopped while it ran (it kills its workers as it stops): whose it was, to say so
        self.lost: str | None = None
        self.owner = owner
        self._lock = threading.Lock()
        with self._lock:
            self._parse()

    def __repr__(self) -> str:
        return f"<PooledProcess pid={self.pid} returncode={self.returncode}>"

    def _parse(self) -> None:
        while b"\n" in self._buf and self.returncode is None:
            line, self._buf = self._buf.split(b"\n", 1)
            said = json.loads(line)
            rc = said.get("returncode")
            if said.get("pool_stopped"):
                self.lost = self.owner
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
        self.lost = self.owner
        log.warning("%s stopped while worker %d ran: its exit status is lost", self.owner, self.pid)

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


class Zygote:
    """The parent's end of one zygote (its process, its control socket)."""

    #: who it is, in what a worker's error says when it stops
    owner = "the worker pool"

    def __init__(self, env: dict[str, str], label: str = "", flavour: str = ""):
        self.flavour = flavour
        self.startup = startup_env(env, flavour)
        self.lock = threading.Lock()
        self.closed = False
        self.errors = tempfile.TemporaryFile()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        zenv = dict(flavour_env(env, flavour), OPENBLAS_NUM_THREADS="1")  # numpy's import starts no thread; workers set their own
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "portability.workers.worker_zygote", str(theirs.fileno()), label,
                                          flavour],
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

    def spawn(self, job_file: Path, log_file: Path, env: dict[str, str], argv: list[str] | None = None) -> PooledProcess | None:
        """The job's worker, forked; None when its environment needs a fresh interpreter. ``argv`` (``[MODULE,
        ARGS...]``): the child runs that module as ``python -m`` would instead, in ``job_file``'s folder."""
        if startup_env(env, self.flavour) != self.startup:
            return None
        errf = open(log_file, "wb")  # as with Popen: a log that cannot be written is the caller's error
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            msg = json.dumps({"job": str(job_file), "cwd": str(job_file.parent), "env": flavour_env(env, self.flavour),
                              "argv": argv}).encode()
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
                             [sys.executable, "-m", *(argv or ["portability.workers.worker", str(job_file)])], rest, self.owner)

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


class RemoteZygote(Zygote):
    """A zygote the resident session runs (``portability.resident``), reached through a copy of its control
    socket that the resident process handed over (``SCM_RIGHTS``), for as long as ``lease`` (the connection it
    came on) is held: its workers fork from the resident's imports — TensorFlow's, in its ``tensorflow`` zygote —
    instead of this process's own zygote's. Closing it gives the lease back; the zygote stays with the resident."""

    def __init__(self, lease: socket.socket, ctl_fd: int, answer: dict, flavour: str = ""):
        self.flavour = flavour
        self.startup = dict(answer.get("startup") or {})
        self.pid = int(answer.get("pid") or 0)
        self.owner = f"the resident session's worker pool (pid {int(answer.get('resident') or 0)})"
        self.lock = threading.Lock()
        self.closed = False
        self.errors = None
        self.lease = lease
        self.ctl = socket.socket(fileno=ctl_fd)

    def _said(self) -> str:
        return ""

    def close(self, wait_s: float = 0) -> None:
        with self.lock:
            self.closed = True
            for s in (self.ctl, self.lease):
                try:
                    s.close()
                except OSError:
                    pass


#: the flavours the resident session does not warm for the next check: they serve conversions only (the TF.js
#: converter's), which a check of a model seen before does not make; a check that has one to make starts its pool
#: while its earlier steps run (``runner.start_pools``), and the pool then stays for the next new model, as the
#: others do, until the session lets go of its pools when idle
ON_DEMAND = (TFJS,)


class ZygoteHost:
    """The resident session's worker pools (a provider of ``portability.resident``, leased whole by its ``pool``
    request): one zygote per flavour and start-up environment, started on the first check that asks (or warmed,
    ``warm``), in that check's worker environment, and kept until the resident session stops or lets go of them."""

    def __init__(self):
        self._zygotes: dict[tuple[str, str], Zygote] = {}
        self._lock = threading.Lock()
        self._starting: dict[tuple[str, str], threading.Lock] = {}  # one start at a time per zygote, not for all
        self.sandbox: dict = {}  # what every provider carries; the workers enter their check's own sandbox

    def zygote(self, flavour: str, env: dict[str, str]) -> Zygote:
        """The zygote of ``flavour`` for workers of ``env``'s start-up environment, started now unless it runs
        (one start at a time: a check asking meanwhile gets the same one). Raises PoolError."""
        from portability.workers.worker_zygote import FLAVOURS

        if flavour not in FLAVOURS:
            raise PoolError(f"no such worker pool: {flavour!r}")
        key = (flavour, json.dumps(startup_env(env, flavour), sort_keys=True))
        with self._lock:
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:
            z = self._zygotes.get(key)
            if z is None or z.proc.poll() is not None:
                z = Zygote(env, "resident", flavour)
                with self._lock:
                    self._zygotes[key] = z
            return z

    def warm(self, flavour: str, env: dict[str, str]) -> None:
        """Start the zygote for the next check (``zygote``), unless only a new model's conversions use it
        (``ON_DEMAND``: the check that has one to make starts it)."""
        if flavour not in ON_DEMAND:
            self.zygote(flavour, env)

    def pools(self) -> list[dict]:
        with self._lock:
            return [{"flavour": f or "plain", "pid": z.proc.pid} for (f, _), z in self._zygotes.items() if z.proc.poll() is None]

    def close(self) -> None:
        with self._lock:
            zygotes, self._zygotes = list(self._zygotes.values()), {}
        for z in zygotes:
            z.close(wait_s=5)
