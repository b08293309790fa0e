"""The resident process: serves leases of the shared services (``workers.services`` providers: the browsers,
the ARM64 emulator) to the checks of one user, over the Unix socket of ``client.socket_path``.

    python -P -m portability.resident.server --socket PATH [--idle SECONDS] [--trim SECONDS]

One provider per (service, sandbox mode), started on its first lease and kept until the process stops: after
``--idle`` seconds with no lease held and no request, on ``{"op": "stop"}``, on SIGTERM/SIGINT. Sooner, after
``--trim`` seconds so (``protocol.TRIM_S``), it lets go of what costs memory and is quick to make again: the worker
pools (a TensorFlow one holds half a gigabyte) and the browsers' kept pages (some 40 MB each); the browsers and
the emulator stay, and the next check starts the pools again beside its model's reading. Only the socket's
owner may connect (the folder is 0700, and the peer's uid is checked). A request is one bounded line read with a
timeout, and picks from closed lists (``protocol``): whatever it is, it gets an answer (``{"ok": false,
"error": ...}`` for what cannot be served) and the process serves on. The services' OS sandbox reads the
emulator's root file system and the provisioned tools, nothing of any check: models come to them by content.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from portability.resident import protocol
from portability.resident.protocol import BadRequest

log = logging.getLogger("portability.resident")
#: the (service, mode) key of the worker pools' provider
_POOL = ("pool", "pool")


def _sandbox(mode: str) -> dict:
    from portability.core.dirs import tools_root
    from portability.core.sandbox import Sandbox
    from portability.mobile import arm64

    return Sandbox(mode=mode, read=(str(arm64.home()), str(tools_root()))).to_dict()


def _new(cls_path: str) -> Any:
    mod, _, name = cls_path.partition(":")
    return getattr(importlib.import_module(mod), name)()


class Resident:
    def __init__(self, path: Path, idle_s: float, trim_s: float = protocol.TRIM_S):
        self.path, self.idle_s, self.trim_s = path, idle_s, trim_s
        #: what the last trim let go of (``trim``), None until one ran; cleared by the next request
        self.trimmed: dict | None = None
        self.started = time.time()
        self._lock = threading.Lock()
        self._providers: dict[tuple[str, str], Any] = {}
        self.leases = 0
        self.served = 0
        #: the checks that hold a lease of a worker pool zygote (``_pool``)
        self.pool_leases = 0
        self._last = time.monotonic()
        #: the last request of a check (a status request is none): what the trim's idle time counts from
        self._last_check = self._last
        self._stop = threading.Event()

    # --- the providers -------------------------------------------------------------------------------
    def provider(self, name: str, mode: str):
        """The provider of service ``name`` (``protocol.PROVIDERS``) in sandbox ``mode``, started now unless it runs.
        Raises BadRequest for a name or mode outside the closed lists."""
        if name not in protocol.PROVIDERS:
            raise BadRequest(f"unknown provider {name!r} (known: {', '.join(protocol.PROVIDERS)})")
        mode = protocol.service_mode(mode)
        with self._lock:
            p = self._providers.get((name, mode))
            if p is None:
                p = _new(protocol.PROVIDERS[name])
                p.sandbox = _sandbox(mode)
                self._providers[(name, mode)] = p
            return p

    def pool_host(self):
        """The provider of the worker pools (``protocol.POOL_HOST``), made now unless it is."""
        with self._lock:
            p = self._providers.get(_POOL)
            if p is None:
                p = self._providers[_POOL] = _new(protocol.POOL_HOST)
            return p

    def close(self) -> None:
        from portability.core.shared import close_all

        with self._lock:
            providers, self._providers = list(self._providers.values()), {}
        close_all(providers, log, "a service")

    # --- requests --------------------------------------------------------------------------------------
    def status(self, memory: bool = False) -> dict:
        """What the session serves; with ``memory``, its tree's memory too (``serve --status``: reading every
        process's page tables takes a tenth of a second or more with its browsers, which a check asking whether
        the session runs should not wait for)."""
        with self._lock:
            services = [{"provider": c, "mode": m, "launches": getattr(p, "launches", 0)}
                        for (c, m), p in self._providers.items()]
            pools = [pool for p in self._providers.values() if hasattr(p, "pools") for pool in p.pools()]
        return {"ok": True, "pid": os.getpid(), "socket": str(self.path), "since": self.started,
                "leases": self.leases, "served": self.served, "idle_s": self.idle_s, "services": services,
                "worker_pools": pools, "pool_leases": self.pool_leases, "trim_s": self.trim_s, "trimmed": self.trimmed,
                **({"memory_mb": tree_memory_mb(os.getpid())} if memory else {})}

    def trim(self) -> dict:
        """Let go of the worker pools and of the browsers' idle kept pages (the module's docstring); what was let go
        of, said in ``status``. Only while no check holds a lease: a page a check claims meanwhile is not idle."""
        with self._lock:
            host = self._providers.pop(_POOL, None) if self.pool_leases == 0 else None
            providers = list(self._providers.values())
        pools = len(host.pools()) if host is not None else 0
        if host is not None:
            host.close()
        pages = 0
        for p in providers:
            try:
                pages += p.release_pages() if hasattr(p, "release_pages") else 0
            except Exception as e:  # a browser that went away meanwhile: nothing of it to let go of
                log.info("letting go of kept pages: %s", e)
        self.trimmed = {"pools": pools, "pages": pages, "at": time.time()}
        log.info("idle %.0f s: let go of %d worker pools and %d kept pages", self.trim_s, pools, pages)
        return self.trimmed

    def handle(self, conn: socket.socket) -> None:
        """One connection: its peer must be this user; its request line comes within ``protocol.REQUEST_TIMEOUT_S``.
        Whatever goes wrong is answered (where the connection still takes it) and logged, never raised."""
        op = None
        try:
            with conn:
                uid = protocol.peer_uid(conn)
                if uid != os.getuid():
                    log.warning("refused a connection of uid %d", uid)
                    return
                conn.settimeout(protocol.REQUEST_TIMEOUT_S)
                op = self._serve_one(conn, conn.makefile("rb"))
        except OSError as e:
            log.info("a connection ended: %s", e)
        except Exception as e:  # a bug, logged where the log is read: the process serves on
            log.error("a request failed: %s: %s", type(e).__name__, e, exc_info=True)
        finally:
            self._last = time.monotonic()
            if op != "status":
                self._last_check = self._last

    def _serve_one(self, conn: socket.socket, f: BinaryIO) -> str | None:
        """Serve the connection's request; its op (None where there was none to read)."""
        try:
            req = _request(f)
            if req is not None:
                self._one(conn, f, req)
                return req.get("op")
            return None
        except BadRequest as e:
            _refuse(conn, str(e))
        except Exception as e:
            _refuse(conn, f"the resident session could not serve it: {type(e).__name__}: {e}")
            raise

    def _one(self, conn: socket.socket, f: BinaryIO, req: dict) -> None:
        op = req.get("op")
        if op not in protocol.OPS:
            raise BadRequest(f"unknown request {op!r} (known: {', '.join(protocol.OPS)})")
        if op == "status":
            return _send(conn, self.status(memory=req.get("memory") is True))
        self.trimmed = None  # a check: what it starts is let go of again after the next idle while
        self._last_check = time.monotonic()
        if op == "stop":
            _send(conn, {"ok": True, "pid": os.getpid()})
            self._stop.set()
            return None
        if op == "pool":
            return self._pool(conn, f, req)
        if op == "warm":
            self.warm(req)
            return _send(conn, {"ok": True})
        flavour = protocol.flavour(req.get("flavour"))
        provider = self.provider(str(req.get("provider")), req.get("mode"))
        if op == "running":
            return _send(conn, {"ok": True, "running": bool(provider.running(flavour))})
        return self._lease(conn, f, provider, flavour)

    def _lease(self, conn: socket.socket, f: BinaryIO, provider: Any, flavour: Any) -> None:
        """A lease of ``provider``'s service, held until the check gives it back or its connection ends."""
        try:
            handle = provider.lease(flavour)
        except (OSError, RuntimeError) as e:
            return _send(conn, {"ok": False, "error": str(e)})
        with self._lock:
            self.leases += 1
            self.served += 1
        unwell = True  # a check that went away without giving it back may have left it hung
        try:
            _send(conn, {"ok": True, "endpoint": handle.endpoint, "pid": os.getpid()})
            conn.settimeout(None)  # held for as long as the check's target runs
            line = protocol.read_line(f)
            if line:
                unwell = bool(protocol.decode(line).get("unwell"))
                _send(conn, {"ok": True})
        finally:
            with self._lock:
                self.leases -= 1
            provider.release(handle, unwell=unwell)
        return None

    def warm(self, req: dict) -> None:
        """Start worker pools in the background (``{"pools": {flavour: env}}``): the next check forks from them at
        once. Raises BadRequest for pools that are not an object of flavours and environments."""
        pools = req.get("pools") or {}
        if not isinstance(pools, dict):
            raise BadRequest("pools is a JSON object: flavour -> environment")
        pools = {str(protocol.flavour(k)): protocol.environment(env) for k, env in pools.items()}

        def start() -> None:
            host = self.pool_host()
            for flavour, env in pools.items():
                try:
                    host.warm(flavour, env)
                except Exception as e:  # a check that asks for it later is told why
                    log.warning("warming the worker pool %r: %s", flavour, e)
            self._last = time.monotonic()

        threading.Thread(target=start, name="warm pools", daemon=True).start()

    def _pool(self, conn: socket.socket, f: BinaryIO, req: dict) -> None:
        """A lease of a worker pool's zygote (its provider, ``workers.zygote_handle.ZygoteHost``, keeps one per
        flavour and start-up environment): a copy of its control socket, held by the check until it gives it back
        or its connection ends (the zygote stays: the next check forks from it too)."""
        flavour, env = str(protocol.flavour(req.get("flavour") or "")), protocol.environment(req.get("env"))
        host = self.pool_host()
        try:
            z = host.zygote(flavour, env)
        except Exception as e:  # the pool's own error, said to the check (which forks its own workers then)
            return _send(conn, {"ok": False, "error": f"the worker pool did not start: {e}"})
        with self._lock:
            self.pool_leases += 1
        try:
            answer = {"ok": True, "pid": z.proc.pid, "startup": z.startup, "resident": os.getpid()}
            socket.send_fds(conn, [protocol.encode(answer)], [z.ctl.fileno()])
            conn.settimeout(None)
            while protocol.read_line(f):  # the check gives it back, or its connection ends
                pass
        finally:
            with self._lock:
                self.pool_leases -= 1
        return None

    # --- the loop --------------------------------------------------------------------------------------
    def idle(self) -> bool:
        """No lease held, and no request for ``--idle`` seconds."""
        return self.leases == 0 and self.pool_leases == 0 and time.monotonic() - self._last > self.idle_s

    def quiet(self) -> bool:
        """No lease held, and no check's request for ``--trim`` seconds (``serve --status`` asking is no check)."""
        return self.leases == 0 and self.pool_leases == 0 and time.monotonic() - self._last_check > self.trim_s

    def serve(self) -> None:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}")
        tmp.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            srv.bind(str(tmp))
        finally:
            os.umask(old)
        srv.listen(64)
        os.replace(tmp, self.path)  # the path appears once connections are accepted
        ino = self.path.stat().st_ino
        srv.settimeout(0.5)
        log.info("resident session %d listening at %s", os.getpid(), self.path)
        try:
            while not self._stop.is_set() and not self.idle():
                try:
                    conn, _ = srv.accept()
                except socket.timeout:
                    if self.trimmed is None and self.trim_s < self.idle_s and self.quiet():
                        self.trimmed = {"pools": 0, "pages": 0, "at": time.time()}  # under way: not started twice
                        threading.Thread(target=self.trim, name="trim", daemon=True).start()
                    continue
                conn.settimeout(None)
                self._last = time.monotonic()
                threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
        finally:
            srv.close()
            if _inode(self.path) == ino:  # still ours, not a newer resident process's
                self.path.unlink(missing_ok=True)
            self.close()
            log.info("resident session %d stopped", os.getpid())


def _request(f: BinaryIO) -> dict | None:
    """A connection's request (None where it ended before sending one). Raises BadRequest."""
    try:
        line = protocol.read_line(f)
    except TimeoutError:
        raise BadRequest(f"no request within {protocol.REQUEST_TIMEOUT_S:g} s") from None
    return protocol.decode(line) if line else None


def _send(conn: socket.socket, answer: dict) -> None:
    conn.sendall(protocol.encode(answer))


def _refuse(conn: socket.socket, error: str) -> None:
    """Say why a request is not served, where the connection still takes it."""
    log.info("refused a request: %s", error)
    try:
        _send(conn, {"ok": False, "error": error})
    except OSError:
        pass


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The resident session of portability's shared services.")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--idle", type=float, default=300.0)
    ap.add_argument("--trim", type=float, default=protocol.TRIM_S)
    ap.add_argument("--warm", help="a JSON file of worker pools to start once listening (removed when read)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=os.environ.get("PORTABILITY_LOG", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    r = Resident(Path(args.socket), args.idle, args.trim)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: r._stop.set())
    if args.warm:
        _warm_from(r, Path(args.warm))
    r.serve()


def _warm_from(r: Resident, path: Path) -> None:
    """Warm the worker pools a file lists (``client._warm_file``: never read through a link), then remove it."""
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
            r.warm(protocol.decode(f.read(protocol.MAX_LINE)))
    except (OSError, ValueError) as e:
        log.warning("no worker pools to warm: %s", e)
    finally:
        path.unlink(missing_ok=True)


def tree_memory_mb(pid: int) -> dict:
    """The memory of ``pid``'s process tree (itself, its services, browsers, emulator and worker pools):
    ``unique`` (USS: the pages no process outside the tree shares, what stopping it frees), ``proportional``
    (PSS: shared pages split among their users) and ``processes``; processes gone or not readable are left out."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return {"unique": None, "proportional": None, "processes": 0}
    uss = pss = 0
    n = 0
    for p in procs:
        try:
            m = p.memory_full_info()
        except psutil.Error:
            continue
        uss, pss, n = uss + m.uss, pss + m.pss, n + 1
    return {"unique": round(uss / 2**20, 1), "proportional": round(pss / 2**20, 1), "processes": n}


if __name__ == "__main__":
    main()

