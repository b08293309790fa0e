"""Shared processes: the bookkeeping every shared service (a browser, the emulated ARM64 interpreter) has
in common, below the engine that leases them and the web and mobile packages that start them."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from typing import Any, ClassVar

log = logging.getLogger(__name__)


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


def close_all(providers, logger: logging.Logger = log, what: str = "a shared service") -> None:
    """Stop each of ``providers`` (``close()``): one that does not stop is logged, and must not keep the others
    running."""
    for p in providers:
        try:
            p.close()
        except Exception as e:  # noqa: BLE001 - whatever it raises, the others stop
            logger.warning("stopping %s: %s", what, e)


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
