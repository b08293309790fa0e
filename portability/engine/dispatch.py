"""The check's third stage: every target's job dispatched to its worker — with the shared service its runtime
uses leased for it, its limits and its turn among the others — and what each worker returns handed to the
:class:`~portability.engine.evaluate.Evaluator`. ``Dispatch.run_check`` gives a :class:`Dispatched`: the
results, every output that ran, and the notes the stages after the plan made."""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from portability.core import inputs as inp
from portability.core.model import ModelInfo
from portability.core.protocol import Job, WorkerResult
from portability.core.status import DIED, Status
from portability.engine import verdict
from portability.engine.evaluate import Evaluator
from portability.engine.plan import Planned
from portability.engine.prepare import Prepared
from portability.settings.options import CheckOptions, Limits
from portability.workers import Services, TimingGate, by_cost, confine, kill_all, run_worker
from portability.workers import start_pools
from portability.report.schema import TargetResult
from portability.targets import Target

log = logging.getLogger(__name__)


class Progress(Protocol):
    def target_started(self, target: Target) -> None: ...
    def target_phase(self, target: Target, phase: str) -> None: ...
    def target_done(self, result: TargetResult) -> None: ...


class Silent:
    def target_started(self, target): pass
    def target_phase(self, target, phase): pass
    def target_done(self, result): pass


@dataclass(frozen=True)
class Dispatched:
    """What the dispatch stage gives the verdict and the report."""

    results: list[TargetResult]
    #: target id -> output name -> array, of every target that ran
    outputs: dict[str, dict[str, np.ndarray]]
    #: the check's notes: the inputs' warnings, the calibration's, the services', then evaluation's (the verdict
    #: adds what the results say of the model as a whole: ``verdict.check_notes``)
    notes: list[str]
    #: the robustness pass, with ``--robustness`` (``metrics.robustness.run.Robustness``)
    robustness: Any = None


class Dispatch:
    """One check's targets in their workers: leases each its worker and shared service, in turn."""

    def __init__(self, model: ModelInfo, feeds: inp.Feeds, opts: CheckOptions, prepared: Prepared, progress: Progress,
                 chosen: Planned, services: Services | None = None):
        self.model, self.feeds, self.opts, self.progress = model, feeds, opts, progress
        self.prepared = prepared
        self.workdir = prepared.workdir
        #: what judges each worker's result against the reference's
        self.evaluator = Evaluator(model, feeds, opts, prepared.robustness, chosen.targets[0].id, chosen.records,
                                   prepared.calibration_facts)
        self.targets = chosen.targets
        self.gate = TimingGate(opts.jobs)
        self.readable = confine.readable(model.path, prepared.workdir, opts.cache_dir) + tuple(
            str(Path(e).absolute().parent) for e in [getattr(opts, "encoder", None)] if e)  # --generate's encoder
        #: a session's services (``engine/session.py``: several checks share them), else the check's own
        self.services = services or Services(confine.shared(opts.sandbox, self.readable), opts.resident)
        self._own_services = services is None
        #: targets without a converter route (id -> why)
        self.no_route: dict[str, str] = chosen.no_route
        #: target id -> (why it cannot run here, the install hint): the plan's
        self.unavailable = dict(chosen.unavailable)
        #: the reference's failure explained, where the inputs were synthesized: (note, hint), else empty
        self.synthesized_failed: list[str] = []
        self._runtimes: dict[str, Any] = {}
        #: the check was interrupted (Ctrl-C): no target starts any more
        self.interrupted = False

    def _runtime(self, target: Target):
        """What the target's runtime is (``Runtime.facts``: its cost, service, group, network), read from its
        class: no runtime is created in the check's own process, only in its worker."""
        from portability.core.target import load_class

        if target.id not in self._runtimes:
            facts = self._runtimes[target.id] = load_class(target.runtime).facts(target.options)
            if facts.service and facts.provider:
                self.services.declare(facts.service, facts.provider)
        return self._runtimes[target.id]

    def _lease(self, target: Target):
        """(services for the job, the lease): the shared service the target's runtime uses (a browser, the
        emulated ARM64 interpreter), started on first use."""
        name = self._runtime(target).service
        if not name:
            return {}, None
        if self.services.running(name):
            endpoint, lease = self.services.lease(name)
        else:
            # a service starts once (a browser, the emulator: seconds) while the others using it wait: none
            # of them holds its job slot meanwhile, and no target times until it is up
            self.gate.blocked(target.id, True)
            try:
                endpoint, lease = self.services.lease(name)
            finally:
                self.gate.blocked(target.id, False, take_slot=True)
        return ({name: endpoint} if endpoint else {}), lease

    def _release(self, lease, wr: WorkerResult) -> WorkerResult:
        """A target that hung, crashed or lost its page may leave the service unwell: later targets get a
        fresh one, and this one stops when no running target uses it. A target whose service went away with
        the resident session says so."""
        unwell = wr.status in DIED or "crash" in (wr.error or "")
        self.services.release(lease, unwell=unwell)
        pid = self.services.lost(lease)
        if pid is not None and wr.status != Status.PASS:
            wr = replace(wr, error=f"the resident session (pid {pid}) stopped while this target ran, and the "
                                   f"service it leased with it: {wr.error or wr.status}")
        return wr

    def prestart(self, targets: list[Target]) -> None:
        """The shared services the available ones of these targets use start now, beside the reference run, and
        the worker pools their workers fork from."""
        ready = [t for t in targets if t.id not in self.no_route and t.id not in self.unavailable]
        self.services.prestart({self._runtime(t).service for t in ready})
        # a target whose conversion has nothing to do for the model, as the cache remembers: skipped, no worker
        self.unavailable.update((tid, (why, None)) for tid, why in start_pools([self.job(t) for t in ready]).items())

    def close(self) -> None:
        if self._own_services:
            self.services.close()

    def run_check(self) -> Dispatched:
        """Every target, then the notes of the whole: see ``_results``."""
        results = self._results()
        return Dispatched(results, dict(self.evaluator.outputs), self._notes(), self.prepared.robustness)

    def _results(self) -> list[TargetResult]:
        """The reference, then every other target beside the others (or skipped, saying why, where the
        reference did not run)."""
        self.prestart(self.targets[1:])
        ref = self.run(self.targets[0])
        if ref.status not in (Status.PASS, Status.FALLBACK):  # a fallback ran: its outputs are compared with
            self.synthesized_failed = inp.failure_help(ref.status, self.feeds, self.opts.value_range, self.model)
            if self.synthesized_failed:
                ref = replace(ref, hint=ref.hint or self.synthesized_failed[1])
            why = f"the reference {ref.id} did not run ({ref.status}): nothing to compare with"
            return [ref] + [self.run(t, skip_reason=why) for t in self.targets[1:]]
        return [ref] + self.run_all(self.targets[1:])

    def _notes(self) -> list[str]:
        """The check's notes: the inputs' warnings, the calibration's, the services', then evaluation's."""
        ev = self.evaluator
        return (list(self.feeds.warnings) + ev.calibration_notes() + list(self.services.notes) + ev.random_note()
                + ev.quantized_note() + self.synthesized_failed[:1])

    def run_all(self, targets: list[Target]) -> list[TargetResult]:
        """Every target, costliest first, ``jobs`` working at once and loaded ones parked to time
        (``workers/schedule.py``); the results in the order of ``targets``."""
        order = by_cost(targets, lambda t: self._runtime(t).cost)
        self.gate.plan([(t.id, self._runtime(t).contends) for t in order])
        pool = ThreadPoolExecutor(max_workers=min(len(order), self.gate.threads()) or 1)
        try:
            done = dict(zip((t.id for t in order), pool.map(self.run, order)))
        except BaseException:  # Ctrl-C: stop every worker (they run in sessions of their own)
            self.interrupted = True  # and start no other: a queued target's thread must not run it
            kill_all()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        return [done[t.id] for t in targets]

    def job(self, target: Target, services: dict[str, str] | None = None, wdir: Path | None = None) -> Job:
        o, p, rob = self.opts, self.prepared, self.prepared.robustness
        return Job(services=dict(services or {}),
                   sandbox=confine.worker(o.sandbox, self.readable, wdir, o.cache_dir, o.use_cache,
                                          self._runtime(target).network, dict(services or {})) if wdir else {},
                   target=target, source=self.model.artifact(), signature=self.model.signature(),
                   feeds=str(p.feeds_file), feeds_source=self.feeds.source, calibration=p.calibration,
                   calibration_source=p.calibration_source,
                   input_names=p.in_names,
                   output_names=self.evaluator.out_names, warmup=o.warmup, runs=o.runs, time_budget_s=o.time_budget_s,
                   sample_budget_s=o.sample_budget_s,
                   cache_dir=str(o.cache_dir) if o.cache_dir else None, use_cache=o.use_cache,
                   convert_timeout_s=o.limits.convert_timeout_s, input_shapes=p.input_shapes, check_id=p.check_id,
                   extra_feeds=str(rob.file) if rob and rob.set.groups else "",
                   extra_clean=rob.set.batches if rob else 0,
                   run_timeout_s=self.limits(target).run_timeout_s, strict_backend=o.strict_backend,
                   pool=self._runtime(target).pool, generate=self._generation(target),
                   time_emulated=getattr(o, "time_emulated", False))

    def _generation(self, target: Target) -> dict:
        """``--generate``'s work for ``target``: the steps and prompt, and for a target other than the reference
        the reference's tokens to feed it under teacher forcing (none when the reference generated none)."""
        gen = self.prepared.generation
        if not gen:
            return {}
        teacher = None if target.id == self.evaluator.reference else self.evaluator.reference_tokens()
        return {**gen, "teacher": teacher}

    def limits(self, target: Target) -> Limits:
        """The check's limits, with the target's own run time limit unless the user set one."""
        limits = self.opts.limits
        if target.run_timeout_s and not self.opts.timeout_explicit:
            limits = Limits(limits.convert_timeout_s, target.run_timeout_s, limits.memory_mb)
        return limits

    def run(self, target: Target, skip_reason: str | None = None) -> TargetResult:
        try:
            return self._run(target, skip_reason)
        finally:
            self.gate.withdraw(target.id)  # skipped, or failed before its start: the others need not wait

    def _run(self, target: Target, skip_reason: str | None) -> TargetResult:
        self.progress.target_started(target)
        t0 = time.monotonic()
        skip_reason = skip_reason or self.no_route.get(target.id)
        why, hint = (skip_reason, None) if skip_reason else self.unavailable.get(target.id, (None, None))
        if why:
            res = verdict.skipped(target, self.opts.gate, why, hint, self.evaluator.thresholds_for(target))
        else:
            wdir = self.workdir / target.id.replace("/", "__")
            log.debug("%s: queued", target.id)
            self.gate.admit(target.id)
            try:
                log.debug("%s: admitted", target.id)
                if self.interrupted:
                    raise KeyboardInterrupt
                services, lease = self._lease(target)
                wr = run_worker(self.job(target, services, wdir), wdir, self.limits(target),
                                lambda ph: self.progress.target_phase(target, ph.value), gate=self.gate)
                wr = self._release(lease, wr)
            finally:
                self.gate.finished(target.id)  # whatever happened, it no longer holds the others' timing
            res = verdict.result(target, self.opts.gate, self.evaluator.evaluate(target, wr, wdir),
                                 strict=self.opts.strict_backend)
        res = replace(res, duration_s=round(time.monotonic() - t0, 3))
        self.progress.target_done(res)
        return res
