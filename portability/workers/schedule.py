"""Parallel where it is free, alone where it is timed.

Targets convert, load and run their correctness batches in parallel: at most ``jobs`` workers work at
once (``--jobs``, default: the cores). A worker that has done its work and is ready to time does not hold
its slot: it *parks* — its model loaded, its page open — and the next target starts in its place. Latency
is sampled with nothing else working: the parked workers time one after another, in the order they became
ready, once no target is left to start (or earlier: when ``parked`` wait, or when memory runs low beside
what the loaded models hold); no target starts while they time. Targets start in the order planned
(``plan``: the costly ones first, ``by_cost``, so that the cores stay busy to the end), except that targets
of one group (sharing a process that serializes their work) work one at a time. So a check's latencies are
as clean as with ``--jobs 1``, while conversions, loads and correctness runs overlap.
"""
from __future__ import annotations

import itertools
import threading
from collections import deque

#: the most loaded workers parked at once (each has a thread in the check)
MAX_PARKED = 32
#: a target starts only while this much memory is left beside what the parked workers hold; else the
#: parked workers time first (and free theirs)
RESERVE_MB = 1536


def memory_low() -> bool:
    """Too little memory left to load one more target beside the parked ones."""
    try:
        import psutil

        return psutil.virtual_memory().available < RESERVE_MB * 2**20
    except Exception:  # psutil missing or /proc unreadable: the count alone bounds
        return False


def by_cost(targets: list, cost) -> list:
    """The targets, costliest first (a stable sort: equal costs keep the order asked for)."""
    return sorted(targets, key=lambda t: -cost(t))


class TimingGate:
    """Shared by the threads that drive the workers of one check."""

    def __init__(self, jobs: int = 1, parked: int | None = None, memory_low=memory_low):
        self.jobs = max(1, jobs)
        self.parked = max(1, parked if parked is not None else MAX_PARKED)
        self._memory_low = memory_low
        self._cv = threading.Condition()
        self._working: set[str] = set()
        self._blocked: set[str] = set()  # waiting for another worker's conversion
        self._waiting: deque[str] = deque()
        self._timing: str | None = None
        self._tickets = itertools.count()
        self._rank: dict[str, int] = {}  # each admitted target's ticket
        self._resuming: list[str] = []  # started targets waiting for a slot again (after a shared service's
        # start): they take slots before any new target, in the order they were admitted
        self._unstarted: dict[str, int] = {}  # targets still to start (planned, or waiting in ``admit``) -> rank
        self._group: dict[str, str] = {}  # target -> the group it works alone in (``plan``)
        self._draining = False  # the parked workers time, all of them, before any target starts

    def threads(self) -> int:
        """Threads the check needs to drive its workers: the working ones and the parked ones."""
        return self.jobs + self.parked

    def plan(self, order: list[tuple[str, str | None]]) -> None:
        """The targets that will ask to start (``admit``), in the order they are to start, each with the group
        it works alone in (``Runtime.contends``) or None. A planned target starts in its turn whenever its
        thread asks; the first one whose group has no target working goes next. Each must be admitted or
        ``withdraw``-n: no target times while a planned one is still to start."""
        with self._cv:
            for tid, group in order:
                self._unstarted[tid] = next(self._tickets)
                if group:
                    self._group[tid] = group

    def withdraw(self, tid: str) -> None:
        """A planned target that will not start (skipped, or failed before its start)."""
        with self._cv:
            if self._unstarted.pop(tid, None) is not None:
                self._cv.notify_all()

    def _turn(self, tid: str) -> bool:
        """``tid`` is the first target still to start whose group has no target working (a target not
        planned ranks after the planned ones, in the order the targets asked)."""
        busy = {self._group[t] for t in self._working if t in self._group}
        for t in sorted(self._unstarted, key=self._unstarted.__getitem__):
            if self._group.get(t) not in busy:
                return t == tid
        return False

    def admit(self, tid: str) -> None:
        """Before a target's worker starts: blocks while ``jobs`` work, while workers time, or while the
        parked workers are as many as allowed, and until it is the target's turn."""
        with self._cv:
            self._unstarted.setdefault(tid, next(self._tickets))
            try:
                self._cv.wait_for(lambda: self._turn(tid) and not self._resuming and self._timing is None
                                  and not self._draining
                                  and len(self._working) < self.jobs and len(self._waiting) < self.parked)
            finally:
                self._rank[tid] = self._unstarted.pop(tid)
            self._working.add(tid)
            if self._waiting and self._memory_low():
                self._draining = True  # the next ones start after the parked ones time and free memory
            self._cv.notify_all()

    def ready(self, tid: str) -> None:
        """The worker finished its work and parks, waiting to time."""
        with self._cv:
            self._working.discard(tid)
            if tid not in self._waiting:
                self._waiting.append(tid)
            if len(self._waiting) >= self.parked:
                self._draining = True
            self._cv.notify_all()

    def blocked(self, tid: str, waiting: bool, take_slot: bool = False) -> None:
        """The worker waits for something another one makes (``waiting``: a conversion, a shared service's
        start): it gives its slot to the next target, and no target times meanwhile. When the wait ends it
        works again: at once (a worker process cannot be paused: the cores are shared a while), or once a
        slot is free (``take_slot``: the check's own thread goes on, it can wait)."""
        with self._cv:
            if waiting and tid in self._working:
                self._working.discard(tid)
                self._blocked.add(tid)
            elif not waiting and tid in self._blocked:
                if take_slot:  # before any target that has not started yet, the earliest admitted first
                    self._resuming.append(tid)
                    try:
                        self._cv.wait_for(lambda: self._timing is None and len(self._working) < self.jobs
                                          and min(self._resuming, key=lambda t: self._rank.get(t, -1)) == tid)
                    finally:
                        self._resuming.remove(tid)
                self._blocked.discard(tid)
                self._working.add(tid)
            self._cv.notify_all()

    def _may_time(self, tid: str) -> bool:
        return (self._timing is None and not self._working and not self._blocked and bool(self._waiting)
                and self._waiting[0] == tid
                and (not self._unstarted or self._draining))

    def try_start(self, tid: str) -> bool:
        """True when ``tid`` may time now (and is then the one timing)."""
        with self._cv:
            return self._start(tid)

    def wait_start(self, tid: str, timeout: float) -> bool:
        """``try_start``, waiting up to ``timeout`` seconds for the turn of ``tid``."""
        with self._cv:
            self._cv.wait_for(lambda: self._may_time(tid) or tid not in self._waiting, timeout=timeout)
            return self._start(tid)

    def _start(self, tid: str) -> bool:
        if not self._may_time(tid):
            return False
        self._waiting.popleft()
        self._timing = tid
        self._draining = True  # the others parked meanwhile time next, before new targets start
        return True

    def finished(self, tid: str) -> None:
        """The worker ended or stopped timing (done, failed or killed), whatever it was doing."""
        with self._cv:
            self._working.discard(tid)
            self._blocked.discard(tid)
            if tid in self._waiting:
                self._waiting.remove(tid)
            if self._timing == tid:
                self._timing = None
            if not self._waiting:
                self._draining = False
            self._cv.notify_all()


class NoGate:
    """A worker run on its own (``run_worker`` without a check around it): it times at once."""

    def admit(self, tid: str) -> None:
        pass

    def ready(self, tid: str) -> None:
        pass

    def try_start(self, tid: str) -> bool:
        return True

    def blocked(self, tid: str, waiting: bool, take_slot: bool = False) -> None:
        pass

    def wait_start(self, tid: str, timeout: float) -> bool:
        return True

    def finished(self, tid: str) -> None:
        pass

