"""A worker's process tree: its processes (from the kernel's per-thread child lists), their memory, and killing
them all (``workers/runner.py``)."""
from __future__ import annotations

import os
import signal
import subprocess


def children(pid: int) -> list[int] | None:
    """The pids of ``pid``'s children, from the kernel's per-thread lists (a few small reads, where psutil
    reads every process's status to find them); None where the kernel keeps no such list."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return kids


def tree(pid: int):
    """The process and its descendants (psutil processes); [] when it is gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        pids, queue = [], [pid]
        while queue:
            kids = children(queue.pop())
            if kids is None:
                return [root] + root.children(recursive=True)
            pids += kids
            queue += kids
    except psutil.Error:
        return []
    procs = [root]
    for child in pids:
        try:
            procs.append(psutil.Process(child))
        except psutil.Error:
            pass  # ended meanwhile
    return procs


def rss_mb(procs) -> float:
    """The memory of a worker's process tree: its resident set, or, where it has children, the sum of their
    proportional sets (a child forked from the worker, ``converters.forked``, shares its pages: counted once)."""
    import psutil

    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().pss if len(procs) > 1 else p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def kill_procs(procs) -> None:
    import psutil

    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def kill_tree(proc: subprocess.Popen) -> None:
    procs = tree(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill_procs(procs)  # anything that left the process group (browsers can)
    proc.wait()
