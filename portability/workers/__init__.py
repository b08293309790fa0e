"""The worker machinery: each target's work in its own process (``worker``), started by the runner
(``runner``: limits, memory watch, kill) from a pool of pre-imported fork servers (``worker_pool``,
``worker_zygote``), timed one at a time (``schedule``), with the shared services it needs (``services``),
converting through the content-addressed cache (``cache``), sandboxed by the rules in ``confine``; a target
that names another Python environment (``Target.python``, made by ``portability.matrix``) has its worker
started in that one.

The seam the engine uses, and the only names it imports from here: ``run_worker(job, folder, limits) ->
WorkerResult`` (``core.protocol.Job`` and ``core.limits.Limits`` in, ``core.protocol.WorkerResult`` out),
``prestart``/``start_pools``/``shutdown``/``kill_all`` (the pools and every worker), ``log_tail``, ``Services`` (the shared services of a
session), ``TimingGate``/``by_cost`` (one timing at a time; the costliest targets first), ``confine``
(the sandbox's rules for a check's folders). Imported on first use: the worker processes themselves import
only what they run.
"""
from __future__ import annotations

from importlib import import_module

_SEAM = {"run_worker": "runner", "shutdown": "runner", "prestart": "runner", "start_pools": "runner", "kill_all": "runner", "log_tail": "runner",
         "Services": "services", "TimingGate": "schedule", "by_cost": "schedule", "confine": None}

__all__ = list(_SEAM)


def __getattr__(name: str):
    if name not in _SEAM:
        raise AttributeError(f"module 'portability.workers' has no attribute {name!r}")
    module = _SEAM[name]
    if module is None:  # a module of its own
        return import_module(f"portability.workers.{name}")
    return getattr(import_module(f"portability.workers.{module}"), name)
