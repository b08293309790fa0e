"""Services a check starts once and shares with its workers: a headless Chromium per flavour
(``browser``, ``browser-webgpu``: ``web/service.py``) and the emulated ARM64 interpreter (``arm64``:
``mobile/arm64_service.py``).

A runtime names the service it uses (``Runtime.service()``); the check leases it before the target's
worker starts and puts its endpoint in the job (``Job.services``). A worker whose target hung or crashed
gives its lease back as unwell: the service is replaced for the targets after it. A provider is any object
with ``lease(flavour) -> handle`` (``handle.endpoint``: a string), ``release(handle, unwell)`` and
``close()``; it starts lazily, on the first lease.
"""
from __future__ import annotations

import importlib
import logging
import os
import signal
import subprocess
import threading
import time
from typing import Any, ClassVar

log = logging.getLogger(__name__)

#: service name -> (provider class "module:Class", the flavour its lease asks for)
PROVIDERS: dict[str, tuple[str, Any]] = {
    "browser": ("portability.web.service:BrowserService", False),
    "browser-webgpu": ("portability.web.service:BrowserService", True),
    "arm64": ("portability.mobile.arm64_service:Arm64Service", None),
}


def stop_group(proc) -> None:
    """Stop a shared process started in a session of its own with a lifeline on its stdin (it ends when that
    pipe does): SIGKILL its whole process group, close the lifeline, reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class SharedProcesses:
    """The bookkeeping every provider shares: one running process per flavour (started on the first lease,
    thread-safe), counted leases, and retirement — ``release(unwell=True)`` sends later leases to a fresh
    process, and a retired one stops once no lease holds it. ``close()`` stops all (idempotent).

    Subclasses give ``start(flavour)``: an object with ``endpoint``, ``alive()`` and ``stop()``."""

    #: what the process is, for the log
    what: ClassVar[str] = "service"
    #: a failed start is not tried again in this check (the targets do without)
    remember_failure: ClassVar[bool] = False

    def __init__(self):
        self._lock = threading.Lock()
        self._current: dict[Any, Any] = {}
        self._users: dict[Any, int] = {}
        self._retired: set = set()
        self._failed: str | None = None
        self._closed = False
        self.launches = 0

    def start(self, flavour):
        raise NotImplementedError

    def lease(self, flavour=None):
        with self._lock:
            p = self._current.get(flavour)
            if p is not None and not p.alive():
                self._retire(p)
                p = None
            if p is None:
                if self._closed:  # a start still asked for (in the background) after the check ended
                    raise RuntimeError(f"the check is over: no {self.what} starts")
                if self._failed:
                    raise RuntimeError(self._failed)
                t0 = time.monotonic()
                try:
                    p = self._current[flavour] = self.start(flavour)
                except (OSError, RuntimeError) as e:
                    if self.remember_failure:
                        self._failed = str(e)
                    raise
                self.launches += 1
                log.info("started the shared %s at %s in %.1f s", self.what, p.endpoint, time.monotonic() - t0)
            self._users[p] = self._users.get(p, 0) + 1
            return p

    def running(self, flavour=None) -> bool:
        """A process of this flavour is up: a lease now is immediate."""
        with self._lock:
            p = self._current.get(flavour)
            return p is not None and p.alive()

    def release(self, p, unwell: bool = False) -> None:
        """Give a lease back; ``unwell``: its target hung or crashed (retire the process)."""
        with self._lock:
            self._users[p] = self._users.get(p, 1) - 1
            if unwell:
                self._retire(p)
            stop = p in self._retired and self._users[p] <= 0
            if stop:
                self._retired.discard(p)
                del self._users[p]
        if stop:
            p.stop()

    def _retire(self, p) -> None:
        for k, v in list(self._current.items()):
            if v is p:
                del self._current[k]
        self._retired.add(p)
        if self._users.get(p, 0) <= 0:
            p.stop()

    def close(self) -> None:
        with self._lock:  # after a start in progress, if any
            self._closed = True
            procs = set(self._current.values()) | self._retired | set(self._users)
            self._current, self._retired, self._users = {}, set(), {}
        for p in procs:
            p.stop()


class Services:
    """The services of one check (thread-safe). ``lease(name)`` gives ``(endpoint, lease)`` or ``(None,
    None)`` when the service cannot start (the worker then does without: its own browser, its own
    emulator)."""

    def __init__(self, sandbox: dict | None = None):
        self._lock = threading.Lock()
        self._providers: dict[str, Any] = {}
        #: the OS sandbox (``core.sandbox.Sandbox.to_dict``: its mode and what it may read) of the services
        #: that read model content (the emulated ARM64 server); each adds the folder it writes
        self.sandbox = dict(sandbox or {})

    def _provider(self, cls_path: str):
        with self._lock:
            p = self._providers.get(cls_path)
            if p is None:
                mod, _, name = cls_path.partition(":")
                p = self._providers[cls_path] = getattr(importlib.import_module(mod), name)()
                p.sandbox = self.sandbox
            return p

    def running(self, name: str) -> bool:
        """The service is up (a lease is immediate), not to be started or waited for."""
        if name not in PROVIDERS:
            return False
        cls_path, flavour = PROVIDERS[name]
        return self._provider(cls_path).running(flavour)

    def lease(self, name: str | None) -> tuple[str | None, Any]:
        if not name or name not in PROVIDERS:
            return None, None
        cls_path, flavour = PROVIDERS[name]
        provider = self._provider(cls_path)
        try:
            handle = provider.lease(flavour)
        except (OSError, RuntimeError) as e:
            log.warning("shared %s unavailable: %s", name, e)
            return None, None
        return handle.endpoint, (provider, handle)

    def prestart(self, names: set[str]) -> None:
        """Start these services in the background (each in a thread of its own) while the check does
        other work: a target then leases a running one instead of waiting for its start."""
        def start(name: str) -> None:
            endpoint, lease = self.lease(name)
            self.release(lease)

        for name in sorted(n for n in names if n in PROVIDERS):
            threading.Thread(target=start, args=(name,), name=f"start {name}", daemon=True).start()

    @staticmethod
    def release(lease, unwell: bool = False) -> None:
        if lease is not None:
            provider, handle = lease
            provider.release(handle, unwell=unwell)

    def close(self) -> None:
        with self._lock:
            providers, self._providers = list(self._providers.values()), {}
        for p in providers:
            try:
                p.close()
            except Exception as e:  # stopping one service must not keep the others running
                log.warning("stopping a shared service: %s", e)
