"""Parallel where it is free, alone where it is timed.

Targets convert, load and run their correctness batches in parallel (``--jobs``, default: the cores).
Latency is sampled with nothing else running: a worker that is ready to time waits (its model loaded,
its page open) until every other worker has finished its own work or is waiting too; then the waiting
workers time one after another, in the order they became ready, and no new target starts meanwhile.
So a check's latencies are as clean as with ``--jobs 1``, while conversions and loads overlap.
"""
from __future__ import annotations

import threading
from collections import deque


class TimingGate:
    """Shared by the threads that drive the workers of one check."""

    def __init__(self):
        self._cv = threading.Condition()
        self._working: set[str] = set()
        self._waiting: deque[str] = deque()
        self._timing: str | None = None

    def admit(self, tid: str) -> None:
        """Before a target's worker starts: blocks while targets wait to time or one is timing."""
        with self._cv:
            self._cv.wait_for(lambda: not self._waiting and self._timing is None)
            self._working.add(tid)

    def ready(self, tid: str) -> None:
        """The worker finished its work and waits to time."""
        with self._cv:
            self._working.discard(tid)
            if tid not in self._waiting:
                self._waiting.append(tid)
            self._cv.notify_all()

    def try_start(self, tid: str) -> bool:
        """True when ``tid`` may time now (and is then the one timing)."""
        with self._cv:
            if self._timing is None and not self._working and self._waiting and self._waiting[0] == tid:
                self._waiting.popleft()
                self._timing = tid
                return True
            return False

    def finished(self, tid: str) -> None:
        """The worker ended (done, failed or killed), whatever it was doing."""
        with self._cv:
            self._working.discard(tid)
            if tid in self._waiting:
                self._waiting.remove(tid)
            if self._timing == tid:
                self._timing = None
            self._cv.notify_all()


class NoGate:
    """A worker run on its own (``run_worker`` without a check around it): it times at once."""

    def admit(self, tid: str) -> None:
        pass

    def ready(self, tid: str) -> None:
        pass

    def try_start(self, tid: str) -> bool:
        return True

    def finished(self, tid: str) -> None:
        pass
