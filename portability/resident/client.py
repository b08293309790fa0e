"""A check's side of the resident session: where its socket is, starting it, and leasing its services.

``PORTABILITY_RESIDENT``: ``auto`` (default: lease from the user's resident session, starting it when none
runs), ``off`` (every check starts its own services). ``PORTABILITY_SERVE_SOCKET`` names one socket to use
instead of the one this installation and environment map to.

Protocol (``protocol.py``): JSON lines over a stream socket. A lease is its own connection::

    -> {"op": "lease", "provider": NAME, "flavour": F, "mode": "auto" | "require"}
    <- {"ok": true, "endpoint": "...", "pid": N}          or {"ok": false, "error": "..."}
    -> {"op": "release", "unwell": false}                 (or the connection ends: released as unwell)
    <- {"ok": true}

and ``{"op": "running", ...}`` (is that service up?), ``{"op": "status"}`` (``"memory": true``: with the tree's
memory, slower) and ``{"op": "stop"}`` are one-shot requests.

Before it sends anything, a check makes sure of whom it talks to: the socket's folder is this user's alone
(``core.dirs.check_private``, the folder of an explicitly named socket too) and the process listening is this
user's (``SO_PEERCRED``). The files it makes there (the lock, the log, the worker pools to warm) are never
opened through a link.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from portability.core import dirs
from portability.resident import protocol

log = logging.getLogger(__name__)

SWITCH = "PORTABILITY_RESIDENT"
SOCKET_ENV = "PORTABILITY_SERVE_SOCKET"
#: seconds without a lease after which the resident process stops by itself
IDLE_S = 300.0
#: how long a check waits for the resident process it started to listen
START_TIMEOUT_S = 15.0
#: what a one-shot request or a lease's answer may take (a lease waits for its service to start)
ANSWER_TIMEOUT_S = 120.0
#: environment variables that are one check's, not the services': they do not pick another resident process
_PER_CHECK = {SWITCH, SOCKET_ENV, "PORTABILITY_DATA_DIR", "PORTABILITY_LOG", "PORTABILITY_DEBUG"}


class Unreachable(Exception):
    """No resident process answers (none runs and none could start, or it died): the check does without."""


class Refused(Unreachable):
    """What would reach the resident process is not this user's alone (its folder, the process listening, a file
    there that is a link): the check does without, and ``portability serve`` says why."""


def mode() -> str:
    value = os.environ.get(SWITCH, "auto").strip().lower() or "auto"
    return "off" if value in ("0", "off", "no", "false") else "auto"


def runtime_dir() -> Path:
    """The user's own folder for the socket and the log (``core.dirs.runtime_dir``). Raises Unreachable."""
    try:
        return dirs.runtime_dir()
    except dirs.NotPrivate as e:
        raise Refused(str(e)) from None


def key() -> str:
    """What picks the resident process: this installation's code (its files' sizes and times), the
    interpreter, its import path and the environment that shapes the services."""
    import portability

    h = hashlib.sha256()
    pkg = Path(portability.__file__).resolve().parent
    for f in sorted(pkg.rglob("*.py")):
        st = f.stat()
        h.update(f"{f.relative_to(pkg)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    env = sorted((k, v) for k, v in os.environ.items()
                 if (k.startswith("PORTABILITY_") and k not in _PER_CHECK) or k in ("PYTHONPATH", "PATH"))
    h.update(json.dumps([sys.executable, str(pkg), env]).encode())
    return h.hexdigest()[:16]


def socket_path() -> Path:
    """``$PORTABILITY_SERVE_SOCKET`` (made absolute: the resident process runs in ``/``), else this installation's
    socket in ``runtime_dir``. Its folder is checked where it is used (``_connect``, ``_start``)."""
    explicit = os.environ.get(SOCKET_ENV)
    return Path(os.path.abspath(explicit)) if explicit else runtime_dir() / f"serve-{key()}.sock"


def own_folder(path: Path, make: bool = False) -> None:
    """The socket's folder is this user's alone (made, mode 0700, where ``make`` and missing). Raises Unreachable."""
    try:
        (dirs.private_dir if make else dirs.check_private)(path.parent)
    except dirs.NotPrivate as e:
        raise Refused(f"refused: {e}") from None
    except OSError as e:
        raise Unreachable(f"no resident session at {path} ({e.strerror or e})") from None


def _connect(path: Path, timeout: float = ANSWER_TIMEOUT_S) -> socket.socket:
    """A connection to the resident process at ``path``, once its folder and its process are known to be this
    user's. Raises Unreachable."""
    own_folder(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        uid = protocol.peer_uid(s)
    except OSError as e:
        s.close()
        raise Unreachable(f"no resident session at {path} ({e.strerror or e})") from None
    if uid != os.getuid():
        s.close()
        raise Refused(f"refused: the process listening at {path} is uid {uid}'s, not this user's ({os.getuid()})")
    return s


def _ask(conn: socket.socket, request: dict) -> dict:
    """Send one request on a connection and read its one-line answer (a JSON object). Raises Unreachable."""
    try:
        conn.sendall(protocol.encode(request))
        return _answer(protocol.read_line(conn.makefile("rb")))
    except OSError as e:
        raise Unreachable(f"the resident session stopped answering ({e})") from None
    except protocol.BadRequest as e:
        raise Unreachable(f"the resident session answered {e}") from None


def _answer(line: bytes) -> dict:
    if not line:
        raise Unreachable("the resident session closed the connection (it stopped)")
    return protocol.decode(line)


def request(op: str, path: Path | None = None, **fields) -> dict:
    """A one-shot request (``status``, ``stop``, ``running``) to the resident process at ``path``."""
    with _connect(path or socket_path(), timeout=10.0) as s:
        return _ask(s, {"op": op, **fields})


def start(path: Path | None = None, idle_s: float = IDLE_S, trim_s: float | None = None) -> dict:
    """The resident process at ``path``: the running one, else one started now (in the background, in a
    session of its own, its log beside the socket). Two checks starting at once start one (a file lock)."""
    path = path or socket_path()
    try:
        return request("status", path)
    except Unreachable:
        pass
    try:
        return _start(path, idle_s, trim_s=trim_s)
    except OSError as e:
        raise Unreachable(f"no resident session could start at {path} ({e.strerror or e})") from None


def _start(path: Path, idle_s: float, warm: dict | None = None, wait: bool = True, trim_s: float | None = None) -> dict:
    own_folder(path, make=True)
    with os.fdopen(_open_own(path.with_suffix(".lock"), os.O_RDWR), "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return request("status", path)  # another check started it meanwhile
        except Unreachable:
            pass
        path.unlink(missing_ok=True)  # a stale socket of a resident process that died
        argv = server_argv(path, idle_s) + (["--trim", str(trim_s)] if trim_s is not None else [])
        if warm:  # the worker pools to start once it listens: read (and removed) by it, in the user's own folder
            argv += ["--warm", str(_warm_file(path, warm))]
        log_file = path.with_suffix(".log")
        pid = _spawn(argv, log_file)
        return _listening(path, pid, log_file) if wait else {"ok": True, "pid": pid, "starting": True}


def _open_own(path: Path, flags: int, new: bool = False) -> int:
    """A file descriptor of ``path`` in the user's own folder: made (mode 0600) where missing, ``new``: made now
    (anything there is removed first); never a link's target. Raises Unreachable for a link."""
    if new:
        path.unlink(missing_ok=True)
    flags |= os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_EXCL if new else 0)
    try:
        return os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Refused(f"refused: {path} is a symbolic link (remove it)") from None
        raise


def _warm_file(path: Path, warm: dict) -> Path:
    warm_file = path.with_suffix(f".warm-{os.getpid()}.json")
    with os.fdopen(_open_own(warm_file, os.O_WRONLY, new=True), "w") as f:
        json.dump(warm, f)
    return warm_file


def server_argv(path: Path, idle_s: float) -> list[str]:
    """The resident process's command line: this interpreter with ``-P`` (the folder it is started from is not
    on its import path, as a module run with ``-m`` would have it first), importing this ``portability``
    through the environment of ``_server_env``."""
    return [sys.executable, "-P", "-m", "portability.resident.server", "--socket", str(path), "--idle", str(idle_s)]


def _server_env() -> dict[str, str]:
    """A worker's environment (``core.child_env.worker_env``: this ``portability`` first on ``PYTHONPATH``), without
    the relative folders of ``PYTHONPATH`` (they would name the current folder, or ``/``'s)."""
    from portability.core.child_env import worker_env

    env = worker_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if os.path.isabs(p))
    return env


def _spawn(argv: list[str], log_file: Path) -> int:
    """Start ``argv`` in ``/``, in a session of its own, through a shell that leaves it behind (it is no child of
    this check, which may end first), its output appended to ``log_file``: its pid."""
    with os.fdopen(_open_own(log_file, os.O_WRONLY | os.O_APPEND), "ab") as err:
        sh = subprocess.run(["/bin/sh", "-c", '"$@" </dev/null >/dev/null & echo $!', "sh", *argv], cwd="/",
                            env=_server_env(), stdout=subprocess.PIPE, stderr=err, start_new_session=True,
                            close_fds=True, text=True)
    return int(sh.stdout.strip() or 0)


def _listening(path: Path, pid: int, log_file: Path) -> dict:
    """The status of the resident process ``pid`` once it listens at ``path``. Raises Unreachable."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not _alive(pid):
            raise Unreachable(f"the resident session exited at start (see {log_file})")
        try:
            return request("status", path)
        except Unreachable:
            time.sleep(0.05)
    _kill(pid)
    raise Unreachable(f"the resident session did not listen within {START_TIMEOUT_S:g} s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a process that exited but was not reaped yet
        return not Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def running(path: Path | None = None) -> bool:
    """A resident session listens at ``path`` (a connection, nothing asked)."""
    try:
        _connect(path or socket_path(), timeout=2.0).close()
        return True
    except Unreachable:
        return False


def warm(pools: dict[str, dict[str, str]], path: Path | None = None) -> None:
    """Have the resident session at ``path`` start these worker pools (flavour -> a worker's environment) in the
    background, for the next check — starting the session itself, without waiting for it, where none runs. A check
    that had to fork its own workers (no session ran when it started) says so at its end: it is not held up."""
    path = path or socket_path()
    try:
        request("warm", path, pools=pools)
    except Unreachable:
        try:
            _start(path, IDLE_S, warm={"pools": pools}, wait=False)
        except OSError as e:
            raise Unreachable(f"no resident session could start at {path} ({e.strerror or e})") from None


def pool(flavour: str, env: dict[str, str], path: Path | None = None) -> tuple[socket.socket, int, dict]:
    """A lease of the resident session's worker pool zygote of ``flavour`` (started there on the first lease, in
    ``env``, a worker's environment: one per flavour and start-up environment): the connection that holds the
    lease, a copy of the zygote's control socket and ``{"pid", "startup", "resident"}``
    (``workers.zygote_handle.RemoteZygote``). Raises Unreachable, or RuntimeError when it cannot start one."""
    path = path or socket_path()
    start(path)
    conn = _connect(path)
    fds: list[int] = []
    try:
        conn.sendall(protocol.encode({"op": "pool", "flavour": flavour, "env": env}))
        data, fds = _line_and_fd(conn)
        answer = _answer(data)
        if not answer.get("ok") or len(fds) != 1:
            raise RuntimeError(answer.get("error") or "the resident session gave no worker pool")
    except BaseException as e:
        for fd in fds:
            os.close(fd)
        conn.close()
        if isinstance(e, OSError):
            raise Unreachable(f"the resident session stopped answering ({e})") from None
        if isinstance(e, protocol.BadRequest):
            raise Unreachable(f"the resident session answered {e}") from None
        raise
    return conn, fds[0], answer


def _line_and_fd(conn: socket.socket) -> tuple[bytes, list[int]]:
    """One answer line (at most ``protocol.MAX_LINE`` bytes) and the file descriptor that came with it."""
    data, fds, _, _ = socket.recv_fds(conn, protocol.MAX_LINE, 1)
    try:
        while data and not data.endswith(b"\n"):
            if len(data) >= protocol.MAX_LINE:
                raise protocol.BadRequest(f"a line over {protocol.MAX_LINE} bytes")
            more = conn.recv(protocol.MAX_LINE - len(data))
            if not more:
                break
            data += more
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return data, fds


class Lease:
    """One service leased from the resident process: its endpoint, for as long as its connection lives."""

    def __init__(self, conn: socket.socket, endpoint: str, pid: int):
        self.conn, self.endpoint, self.pid = conn, endpoint, pid
        #: the resident process went away while this lease was held (its service with it)
        self.lost = False

    def end(self, unwell: bool) -> None:
        try:
            _ask(self.conn, {"op": "release", "unwell": bool(unwell)})
        except (Unreachable, ValueError):
            self.lost = True
        finally:
            self.conn.close()


class RemoteProvider:
    """A provider (``workers.services``) whose processes are the resident session's: ``lease(flavour)``,
    ``release(handle, unwell)``, ``running(flavour)``, ``close()``. ``sandbox`` is the check's: its mode
    picks the resident service (one per provider, flavour and sandbox mode). A provider the resident session
    does not serve (``protocol.PROVIDERS``), or a check whose sandbox is off, raises Unreachable on its first
    lease: the check starts its own."""

    def __init__(self, provider: str, path: Path):
        self.provider, self.path = provider, path
        self.sandbox: dict = {}
        self._started = False

    def _fields(self, flavour: Any) -> dict:
        """The request's fields. Raises Unreachable where the resident session cannot serve them."""
        name = protocol.provider_name(self.provider)
        if name is None:
            raise Unreachable(f"the resident session serves no {self.provider}")
        try:
            mode = protocol.service_mode(self.sandbox.get("mode"))
        except protocol.BadRequest as e:
            raise Unreachable(str(e)) from None
        return {"provider": name, "flavour": flavour, "mode": mode}

    def lease(self, flavour: Any = None) -> Lease:
        fields = self._fields(flavour)
        if not self._started:
            start(self.path)  # raises Unreachable when it cannot run
            self._started = True
        conn = _connect(self.path)
        try:
            answer = _ask(conn, {"op": "lease", **fields})
        except BaseException:
            conn.close()
            raise
        if not answer.get("ok") or not answer.get("endpoint"):
            conn.close()
            raise RuntimeError(answer.get("error") or "the resident session refused the lease")
        return Lease(conn, str(answer["endpoint"]), int(answer.get("pid") or 0))

    def release(self, handle: Lease, unwell: bool = False) -> None:
        handle.end(unwell)

    def running(self, flavour: Any = None) -> bool:
        try:
            return bool(request("running", self.path, **self._fields(flavour)).get("running"))
        except (Unreachable, ValueError):
            return False

    def close(self) -> None:
        """Nothing to stop: the services stay with the resident process."""
