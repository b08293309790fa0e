"""The resident process: serves leases of the shared services (``workers.services`` providers: the browsers,
the ARM64 emulator) to the checks of one user, over the Unix socket of ``client.socket_path``.

    python -m portability.resident.server --socket PATH [--idle SECONDS]

One provider per (provider class, sandbox mode), started on its first lease and kept until the process
stops: after ``--idle`` seconds with no lease held and no request, on ``{"op": "stop"}``, on SIGTERM/SIGINT.
Only the socket's owner may connect (the folder is 0700, and the peer's uid is checked). The services'
OS sandbox reads the emulator's root file system and the provisioned tools, nothing of any check: models
come to them by content.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("portability.resident")


def _sandbox(mode: str) -> dict:
    from portability.core.dirs import tools_root
    from portability.core.sandbox import Sandbox
    from portability.mobile import arm64

    return Sandbox(mode=mode, read=(str(arm64.home()), str(tools_root()))).to_dict()


class Resident:
    def __init__(self, path: Path, idle_s: float):
        self.path, self.idle_s = path, idle_s
        self.started = time.time()
        self._lock = threading.Lock()
        self._providers: dict[tuple[str, str], Any] = {}
        self.leases = 0
        self.served = 0
        #: the checks that hold a lease of a worker pool zygote (``_pool``)
        self.pool_leases = 0
        self._last = time.monotonic()
        self._stop = threading.Event()

    # --- the providers -------------------------------------------------------------------------------
    def provider(self, cls_path: str, mode: str):
        with self._lock:
            p = self._providers.get((cls_path, mode))
            if p is None:
                mod, _, name = cls_path.partition(":")
                p = self._providers[(cls_path, mode)] = getattr(importlib.import_module(mod), name)()
                p.sandbox = _sandbox(mode)
            return p

    def close(self) -> None:
        with self._lock:
            providers, self._providers = list(self._providers.values()), {}
        for p in providers:
            try:
                p.close()
            except Exception as e:  # one service that does not stop must not keep the others running
                log.warning("stopping a service: %s", e)

    # --- requests --------------------------------------------------------------------------------------
    def status(self) -> dict:
        with self._lock:
            services = [{"provider": c, "mode": m, "launches": getattr(p, "launches", 0)}
                        for (c, m), p in self._providers.items()]
            pools = [pool for p in self._providers.values() if hasattr(p, "pools") for pool in p.pools()]
        return {"ok": True, "pid": os.getpid(), "socket": str(self.path), "since": self.started,
                "leases": self.leases, "served": self.served, "idle_s": self.idle_s, "services": services,
                "worker_pools": pools, "pool_leases": self.pool_leases}

    def handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                if _peer_uid(conn) != os.getuid():
                    return
                f = conn.makefile("rb")
                line = f.readline()
                if line:
                    self._one(conn, f, json.loads(line))
        except (OSError, ValueError) as e:
            log.info("a connection ended: %s", e)
        finally:
            self._last = time.monotonic()

    def _one(self, conn: socket.socket, f, req: dict) -> None:
        op = req.get("op")
        if op == "status":
            return _send(conn, self.status())
        if op == "stop":
            _send(conn, {"ok": True, "pid": os.getpid()})
            self._stop.set()
            return None
        if op == "pool":
            return self._pool(conn, f, req)
        if op == "warm":
            self.warm(req)
            return _send(conn, {"ok": True})
        provider = self.provider(str(req.get("provider")), str(req.get("mode") or "auto"))
        if op == "running":
            return _send(conn, {"ok": True, "running": provider.running(req.get("flavour"))})
        if op != "lease":
            return _send(conn, {"ok": False, "error": f"unknown request {op!r}"})
        try:
            handle = provider.lease(req.get("flavour"))
        except (OSError, RuntimeError) as e:
            return _send(conn, {"ok": False, "error": str(e)})
        with self._lock:
            self.leases += 1
            self.served += 1
        unwell = True  # a check that went away without giving it back may have left it hung
        try:
            _send(conn, {"ok": True, "endpoint": handle.endpoint, "pid": os.getpid()})
            line = f.readline()
            if line:
                unwell = bool(json.loads(line).get("unwell"))
                _send(conn, {"ok": True})
        finally:
            with self._lock:
                self.leases -= 1
            provider.release(handle, unwell=unwell)
        return None

    def warm(self, req: dict) -> None:
        """Start worker pools in the background (``{"provider", "pools": {flavour: env}}``): the next check forks
        from them at once."""
        def start() -> None:
            host = self.provider(str(req.get("provider")), "pool")
            for flavour, env in dict(req.get("pools") or {}).items():
                try:
                    host.zygote(str(flavour), {str(k): str(v) for k, v in dict(env).items()})
                except Exception as e:  # a check that asks for it later is told why
                    log.warning("warming the worker pool %r: %s", flavour, e)
            self._last = time.monotonic()

        threading.Thread(target=start, name="warm pools", daemon=True).start()

    def _pool(self, conn: socket.socket, f, req: dict) -> None:
        """A lease of a worker pool's zygote (its provider, ``workers.zygote_handle.ZygoteHost``, keeps one per
        flavour and start-up environment): a copy of its control socket, held by the check until it gives it back
        or its connection ends (the zygote stays: the next check forks from it too)."""
        host = self.provider(str(req.get("provider")), "pool")
        try:
            z = host.zygote(str(req.get("flavour") or ""), {str(k): str(v) for k, v in dict(req.get("env") or {}).items()})
        except Exception as e:  # the pool's own error, said to the check (which forks its own workers then)
            return _send(conn, {"ok": False, "error": f"the worker pool did not start: {e}"})
        with self._lock:
            self.pool_leases += 1
        try:
            answer = {"ok": True, "pid": z.proc.pid, "startup": z.startup, "resident": os.getpid()}
            socket.send_fds(conn, [(json.dumps(answer) + "\n").encode()], [z.ctl.fileno()])
            f.readline()  # the check gives it back, or its connection ends
        finally:
            with self._lock:
                self.pool_leases -= 1
        return None

    # --- the loop --------------------------------------------------------------------------------------
    def idle(self) -> bool:
        return self.leases == 0 and self.pool_leases == 0 and time.monotonic() - self._last > self.idle_s

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


def _send(conn: socket.socket, answer: dict) -> None:
    conn.sendall((json.dumps(answer) + "\n").encode())


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The resident session of portability's shared services.")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--idle", type=float, default=300.0)
    ap.add_argument("--warm", help="a JSON file of worker pools to start once listening (removed when read)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=os.environ.get("PORTABILITY_LOG", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    r = Resident(Path(args.socket), args.idle)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: r._stop.set())
    if args.warm:
        try:
            with open(args.warm) as f:
                r.warm(json.load(f))
        except (OSError, ValueError) as e:
            log.warning("no worker pools to warm: %s", e)
        finally:
            Path(args.warm).unlink(missing_ok=True)
    r.serve()


if __name__ == "__main__":
    main()
