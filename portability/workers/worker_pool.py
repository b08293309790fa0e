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
import logging
import os
import threading
import time
from pathlib import Path

from portability.workers.worker_zygote import FLAVOURS, PoolError
from portability.workers.zygote_handle import PooledProcess, RemoteZygote, Zygote

log = logging.getLogger(__name__)

#: ``0`` starts every worker as a fresh interpreter (to compare, or to debug)
SWITCH = "PORTABILITY_WORKER_POOL"


def enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip() != "0"


_lock = threading.Lock()
#: the running zygote of each flavour ("", ``tensorflow``, ``torch``: ``worker_zygote.FLAVOURS``)
_zygotes: dict[str, Zygote] = {}
#: the flavours whose zygote could not start or died: their workers start as fresh interpreters until :func:`shutdown`
_broken: set[str] = set()
#: one lock per flavour held while its zygote starts: a TensorFlow zygote's start holds up no other worker
_starting: dict[str, threading.Lock] = {f: threading.Lock() for f in FLAVOURS}
_atexit_registered = False
#: the resident session whose zygotes workers fork from first (``use_resident``; None: this process's own only),
#: the zygotes of it this process holds a lease of, and the flavours it could not give
_resident: Path | None = None
_remote: dict[str, RemoteZygote] = {}
_remote_broken: set[str] = set()
#: the flavours this process forked its own workers of because no resident session ran (with the environment they
#: started in): at the end (``shutdown``) the resident session is started, or asked, to have them ready next time
_unserved: dict[str, dict[str, str]] = {}


#: this process's own zygotes serve more than one check (a session's): a zygote of another flavour than the plain
#: one (TensorFlow's) is worth its start then, or where two or more workers of the one check fork from it (``_worth``);
#: else its workers fork from the plain one and import it themselves
_lasting = False
_worth: set[str] = set()


def use_resident(path: Path | None, lasting: bool = False) -> None:
    """Fork workers from the zygotes of the resident session at ``path`` (``portability.resident``: started
    there once, kept between checks — TensorFlow's import with them), this process's own where it cannot give
    one; None: this process's own only. ``lasting``: this process's own zygotes serve several checks."""
    global _resident, _lasting
    _resident, _lasting = path, lasting


def worth(flavours) -> None:
    """These flavours' zygotes are worth their start for this check alone: two or more of its workers fork from each
    (``engine.dispatch``); the end of the check (``shutdown``) forgets them."""
    with _lock:
        _worth.update(flavours)


def _own(flavour: str) -> str:
    """The flavour of this process's own zygote that serves a job of ``flavour``."""
    return flavour if _lasting or flavour in _worth else ""


def serves(flavour: str) -> bool:
    """Whether a worker of ``flavour`` forks from a zygote of that flavour (the resident session's, or this process's
    own where it is worth its start), not from the plain one."""
    return enabled() and bool(flavour) and (_own(flavour) == flavour or (_resident is not None and flavour not in _remote_broken))


def _registered() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered = True


def _attached(env: dict[str, str], flavour: str) -> RemoteZygote | None:
    """The resident session's zygote of ``flavour``, leased now unless it is (``_starting[flavour]`` held); None
    when there is no resident session to use, or it cannot give one."""
    path = _resident
    with _lock:
        if path is None or flavour in _remote_broken:
            return None
        z = _remote.get(flavour)
    if z is not None:
        return z
    from portability.resident import client

    if not client.running(path):  # this check does not wait for a session to start and import: its own, and
        with _lock:               # the session started at its end, its pools warm for the next check
            _remote_broken.add(flavour)
            _unserved[flavour] = dict(env)
        return None
    t0 = time.monotonic()
    try:
        z = RemoteZygote(*client.pool(flavour, env, path), flavour=flavour)
    except (client.Unreachable, OSError, RuntimeError, ValueError, KeyError) as e:
        with _lock:
            _remote_broken.add(flavour)
        log.warning("the resident session's worker pool%s could not be used (%s): this check forks its own workers",
                    f" ({flavour})" if flavour else "", e)
        return None
    log.debug("the resident session's worker pool%s leased in %.2f s", f" ({flavour})" if flavour else "",
              time.monotonic() - t0)
    with _lock:
        _remote[flavour] = z
        _registered()
    return z


def _started(env: dict[str, str], label: str, flavour: str = "") -> Zygote | None:
    """The zygote of ``flavour``, started now unless it runs (``_starting[flavour]`` held); None when it cannot start."""
    with _lock:
        if flavour in _broken:
            return None
        z = _zygotes.get(flavour)
    if z is not None:
        return z
    t0 = time.monotonic()
    try:
        z = Zygote(env, label, flavour)
        log.debug("the worker pool%s started in %.2f s", f" ({flavour})" if flavour else "", time.monotonic() - t0)
    except PoolError as e:
        with _lock:
            _broken.add(flavour)
        log.warning("the worker pool%s did not start (%s): workers start as fresh processes",
                    f" ({flavour})" if flavour else "", e)
        return None
    with _lock:
        _zygotes[flavour] = z
        _registered()
    return z


def prestart(env: dict[str, str], label: str = "", flavour: str = "") -> threading.Thread | None:
    """Start the zygote of ``flavour`` in the background, in ``env`` (a worker's environment), while the check
    does other work (reads the model, plans the targets): its first worker then forks at once instead of waiting
    for the imports. A job whose environment needs another start is still a fresh interpreter (``spawn``).
    Returns the thread that starts it (None: the pool is off)."""
    if not enabled():
        return None

    def start() -> None:
        with _starting[flavour]:
            _attached(env, flavour) or (_own(flavour) == flavour and _started(env, label, flavour))

    t = threading.Thread(target=start, name=f"worker pool start {flavour}".strip(), daemon=True)
    t.start()
    return t


def spawn(job_file: Path, log_file: Path, env: dict[str, str], flavour: str = "",
          argv: list[str] | None = None) -> PooledProcess | None:
    """The job's worker forked from the zygote of ``flavour`` (started on first use), or None: start it as a fresh
    interpreter (the pool is off, could not start, stopped, or the job's environment needs one). ``argv``: a
    module's command line the child runs instead (``run_module``)."""
    if not enabled():
        return None
    with _starting[flavour]:
        remote = _attached(env, flavour)
    if remote is not None:
        try:
            proc = remote.spawn(Path(job_file), Path(log_file), env, argv)
        except PoolError as e:
            with _lock:
                if _remote.get(flavour) is remote:
                    del _remote[flavour]
                    _remote_broken.add(flavour)
            log.warning("%s stopped (%s): this check forks its own workers", remote.owner, e)
            remote.close()
        else:
            if proc is not None:
                return proc  # else its environment needs another start: this process's own zygote, or a fresh one
    t0 = time.monotonic()
    flavour = _own(flavour)
    with _starting[flavour]:
        z = _started(env, str(Path(job_file).parent.parent), flavour)
    log.debug("a worker waited %.2f s for the pool", time.monotonic() - t0)
    if z is None:
        return None
    try:
        return z.spawn(Path(job_file), Path(log_file), env, argv)
    except PoolError as e:
        with _lock:
            if _zygotes.get(flavour) is z:
                del _zygotes[flavour]
                _broken.add(flavour)
        if not z.closed:
            log.warning("the worker pool stopped (%s): workers start as fresh processes", e)
        z.close()
        return None


def pid(flavour: str = "") -> int | None:
    """The pid of this process's own running zygote (None: none runs)."""
    z = _zygotes.get(flavour)
    return z.proc.pid if z is not None else None


def remote_pid(flavour: str = "") -> int | None:
    """The pid of the resident session's zygote this process holds a lease of (None: none)."""
    z = _remote.get(flavour)
    return z.pid if z is not None else None


def shutdown() -> None:
    """Stops every zygote of this process's own and gives the resident session's back (the end of a check, Ctrl-C,
    exit); the next worker starts or leases a new one (from the resident session the next check names)."""
    global _resident, _lasting
    with _lock:
        path, _resident, _lasting = _resident, None, False
        stopping = list(_zygotes.values()) + list(_remote.values())
        unserved = dict(_unserved)
        _zygotes.clear()
        _remote.clear()
        _broken.clear()
        _remote_broken.clear()
        _unserved.clear()
        _worth.clear()
    for z in stopping:
        z.close()
    if path is not None and unserved:
        from portability.resident import client

        try:
            client.warm(unserved, path)
        except client.Unreachable as e:
            log.debug("the resident session's worker pools were not warmed: %s", e)


def run_module(argv: list[str], env: dict[str, str], cwd: Path, flavour: str, timeout_s: float):
    """``python -m MODULE ARGS`` (``argv`` = ``[MODULE, ARGS...]``) run in a child forked from the zygote of
    ``flavour``, in ``cwd`` with ``env`` (a worker's: ``runner.run_module``), as ``subprocess.run(capture_output=True,
    text=True)`` gives it (its stderr kept in a file in ``cwd``); past ``timeout_s`` its process group is killed and
    ``subprocess.TimeoutExpired`` raised. None where the pool cannot serve it: run it as a fresh interpreter. A
    source's reader (``sources``) runs so: forked after TensorFlow's import, a SavedModel's or a Keras file's reading
    does not import it again."""
    import signal
    import subprocess

    from portability.core.pipes import read_to_end

    log_file = cwd / "child.log"
    proc = spawn(cwd / "child", log_file, env, flavour, argv)
    if proc is None:
        return None
    proc.stdin.close()
    deadline = time.monotonic() + timeout_s
    try:
        with proc.stdout:
            out, late = read_to_end(proc.stdout.fileno(), deadline)
        if late:
            raise subprocess.TimeoutExpired([*argv], timeout_s)
        rc = proc.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        raise
    err = log_file.read_text(errors="replace") if log_file.is_file() else ""
    return subprocess.CompletedProcess([*argv], rc, out.decode(errors="replace"), err)
