"""A check's side of the resident session: where its socket is, starting it, and leasing its services.

``PORTABILITY_RESIDENT``: ``auto`` (default: lease from the user's resident session, starting it when none
runs), ``off`` (every check starts its own services). ``PORTABILITY_SERVE_SOCKET`` names one socket to use
instead of the one this installation and environment map to.

Protocol: JSON lines over a stream socket. A lease is its own connection::

    -> {"op": "lease", "provider": "module:Class", "flavour": F, "mode": SANDBOX_MODE}
    <- {"ok": true, "endpoint": "...", "pid": N}          or {"ok": false, "error": "..."}
    -> {"op": "release", "unwell": false}                 (or the connection ends: released as unwell)
    <- {"ok": true}

and ``{"op": "running", ...}`` (is that service up?), ``{"op": "status"}`` and ``{"op": "stop"}`` are
one-shot requests.
"""
from __future__ import annotations

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


def mode() -> str:
    value = os.environ.get(SWITCH, "auto").strip().lower() or "auto"
    return "off" if value in ("0", "off", "no", "false") else "auto"


def runtime_dir() -> Path:
    """The user's own folder for the socket and the log (mode 0700; refused if another user owns it)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    d = Path(base) / "portability" if base and os.access(base, os.W_OK) else Path(f"/tmp/portability-{os.getuid()}")
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise Unreachable(f"{d} is not this user's own folder (owner {st.st_uid}, mode {oct(st.st_mode & 0o777)})")
    return d


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
    explicit = os.environ.get(SOCKET_ENV)
    return Path(explicit) if explicit else runtime_dir() / f"serve-{key()}.sock"


def _connect(path: Path, timeout: float = ANSWER_TIMEOUT_S) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
    except OSError as e:
        s.close()
        raise Unreachable(f"no resident session at {path} ({e.strerror or e})") from None
    return s


def _ask(conn: socket.socket, request: dict) -> dict:
    """Send one request on a connection and read its one-line answer."""
    try:
        conn.sendall((json.dumps(request) + "\n").encode())
        line = conn.makefile("rb").readline()
    except OSError as e:
        raise Unreachable(f"the resident session stopped answering ({e})") from None
    if not line:
        raise Unreachable("the resident session closed the connection (it stopped)")
    return json.loads(line)


def request(op: str, path: Path | None = None, **fields) -> dict:
    """A one-shot request (``status``, ``stop``, ``running``) to the resident process at ``path``."""
    with _connect(path or socket_path(), timeout=10.0) as s:
        return _ask(s, {"op": op, **fields})


def start(path: Path | None = None, idle_s: float = IDLE_S) -> dict:
    """The resident process at ``path``: the running one, else one started now (in the background, in a
    session of its own, its log beside the socket). Two checks starting at once start one (a file lock)."""
    path = path or socket_path()
    try:
        return request("status", path)
    except Unreachable:
        pass
    try:
        return _start(path, idle_s)
    except OSError as e:
        raise Unreachable(f"no resident session could start at {path} ({e.strerror or e})") from None


def _start(path: Path, idle_s: float, warm: dict | None = None, wait: bool = True) -> dict:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return request("status", path)  # another check started it meanwhile
        except Unreachable:
            pass
        path.unlink(missing_ok=True)  # a stale socket of a resident process that died
        log_file = path.with_suffix(".log")
        # started through a shell that leaves it behind: it is no child of this check, which may end first
        argv = [sys.executable, "-m", "portability.resident.server", "--socket", str(path), "--idle", str(idle_s)]
        if warm:  # the worker pools to start once it listens: read (and removed) by it, in the user's own folder
            warm_file = path.with_suffix(f".warm-{os.getpid()}.json")
            fd = os.open(warm_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(warm, f)
            argv += ["--warm", str(warm_file)]
        with open(log_file, "ab") as err:
            sh = subprocess.run(["/bin/sh", "-c", '"$@" </dev/null >/dev/null & echo $!', "sh", *argv],
                                stdout=subprocess.PIPE, stderr=err, start_new_session=True, close_fds=True, text=True)
        pid = int(sh.stdout.strip() or 0)
        if not wait:
            return {"ok": True, "pid": pid, "starting": True}
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


#: the resident session's provider of worker pools
POOL_HOST = "portability.workers.zygote_handle:ZygoteHost"


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
        request("warm", path, provider=POOL_HOST, pools=pools)
    except Unreachable:
        try:
            _start(path, IDLE_S, warm={"provider": POOL_HOST, "pools": pools}, wait=False)
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
    try:
        conn.sendall((json.dumps({"op": "pool", "provider": POOL_HOST, "flavour": flavour, "env": env}) + "\n").encode())
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 1)
        while data and not data.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                break
            data += more
    except OSError as e:
        conn.close()
        raise Unreachable(f"the resident session stopped answering ({e})") from None
    try:
        answer = json.loads(data) if data else {"error": "the resident session closed the connection (it stopped)"}
        if not answer.get("ok") or len(fds) != 1:
            raise RuntimeError(answer.get("error") or "the resident session gave no worker pool")
    except BaseException:
        for fd in fds:
            os.close(fd)
        conn.close()
        raise
    return conn, fds[0], answer


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
    picks the resident service (one per provider, flavour and sandbox mode)."""

    def __init__(self, provider: str, path: Path):
        self.provider, self.path = provider, path
        self.sandbox: dict = {}
        self._started = False

    def _fields(self, flavour: Any) -> dict:
        return {"provider": self.provider, "flavour": flavour, "mode": self.sandbox.get("mode", "auto")}

    def lease(self, flavour: Any = None) -> Lease:
        if not self._started:
            start(self.path)  # raises Unreachable when it cannot run
            self._started = True
        conn = _connect(self.path)
        try:
            answer = _ask(conn, {"op": "lease", **self._fields(flavour)})
        except BaseException:
            conn.close()
            raise
        if not answer.get("ok"):
            conn.close()
            raise RuntimeError(answer.get("error") or "the resident session refused the lease")
        return Lease(conn, answer["endpoint"], int(answer.get("pid") or 0))

    def release(self, handle: Lease, unwell: bool = False) -> None:
        handle.end(unwell)

    def running(self, flavour: Any = None) -> bool:
        try:
            return bool(request("running", self.path, **self._fields(flavour)).get("running"))
        except (Unreachable, ValueError):
            return False

    def close(self) -> None:
        """Nothing to stop: the services stay with the resident process."""
