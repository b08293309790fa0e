"""The check: model -> feeds -> reference -> every target in its worker -> metrics -> Report."""
from __future__ import annotations

import logging
import os
import platform
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import numpy as np

import portability
from portability.core import inputs as inp
from portability.core.artifact import artifact_notes
from portability.core.errors import UsageError
from portability.core.model import ModelInfo, quantization
from portability.core.protocol import Job, WorkerResult, load_outputs, save_feeds
from portability.engine import plan, verdict, versions
from portability.engine.options import CheckOptions, Limits
from portability.workers import Services, TimingGate, by_cost, confine, kill_all, log_tail, run_worker, shutdown
from portability import metrics
from portability.metrics import accuracy as acc
from portability.metrics import drift, thresholds
from portability.metrics.base import Evaluation
from portability.metrics.latency import samples_note, summarize, timing_note
from portability.report.schema import Report, TargetResult
from portability.sources import load_source_isolated
from portability.targets import REFERENCE, Target, availability

log = logging.getLogger(__name__)

ENV_PACKAGES = ("numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "tensorflow-cpu", "ai-edge-litert", "onnx2tf",
                "tensorflowjs", "playwright", "torch")


class Progress(Protocol):
    def target_started(self, target: Target) -> None: ...
    def target_phase(self, target: Target, phase: str) -> None: ...
    def target_done(self, result: TargetResult) -> None: ...


class _Silent:
    def target_started(self, target): pass
    def target_phase(self, target, phase): pass
    def target_done(self, result): pass


def prepare_feeds(model: ModelInfo, opts: CheckOptions) -> inp.Feeds:
    if opts.inputs and opts.dataset:
        raise UsageError("give --inputs or --dataset, not both")
    given = inp.parse_shapes(opts.shapes, model)
    shapes, warnings = inp.resolve_shapes(model, given)
    if opts.dataset:
        feeds = inp.from_dataset(model, Path(opts.dataset), shapes, opts.samples)
    elif opts.inputs:
        feeds = inp.from_file(model, Path(opts.inputs), given)
        warnings = []
    else:
        feeds = inp.synthesize(model, shapes, opts.samples or inp.DEFAULT_SAMPLES, opts.seed, opts.value_range)
    feeds.warnings[:0] = warnings
    return feeds


def environment(sandbox: str = "auto") -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from portability.core.sandbox import status

    pkgs = {}
    for p in ENV_PACKAGES:
        try:
            pkgs[p] = version(p)
        except PackageNotFoundError:
            pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ok, why = status()
    return {"python": platform.python_version(), "platform": platform.platform(), "cpu": cpu,
            "cores": os.cpu_count(), "packages": pkgs,
            "sandbox": "off (--sandbox off)" if sandbox == "off" else why if ok else f"none: {why}"}


class _Run:
    """One check in progress: holds the reference's outputs and turns worker results into TargetResults."""

    def __init__(self, model: ModelInfo, feeds: inp.Feeds, opts: CheckOptions, workdir: Path, progress: Progress,
                 robustness=None, services: Services | None = None):
        self.model, self.feeds, self.opts, self.workdir, self.progress = model, feeds, opts, workdir, progress
        #: the robustness pass (``metrics.robustness.run.Robustness``), with ``--robustness``
        self.robustness = robustness
        self.ref_perturbed: dict[str, np.ndarray] = {}
        self.in_names = tuple(i.name for i in model.inputs)
        self.out_names = tuple(o.name for o in model.outputs)
        #: the bounds of a model quantized already (``metrics.thresholds``), else None
        self.quantized = {"static": thresholds.INT8, "dynamic": thresholds.DYNINT8}.get(quantization(model.quantized_ops))
        if opts.scores_output and opts.scores_output not in self.out_names:
            raise UsageError(f"--scores-output {opts.scores_output}: the model has no such output "
                             f"(outputs: {', '.join(self.out_names)})")
        #: the static shape of every input with a dynamic dimension, as the feeds have it: what converters get
        self.input_shapes = {s.name: [int(d) for d in feeds.arrays[s.name].shape[1:]] for s in model.inputs
                             if any(not isinstance(d, int) for d in s.shape)}
        self.feeds_file = workdir / "feeds.npz"
        self.check_id = workdir.name  # unique per check (a fresh temporary folder)
        save_feeds(feeds.arrays, self.feeds_file, self.in_names)
        self.ref_outputs: dict[str, np.ndarray] = {}
        self.ref_metrics: dict = {}
        self.score_name: str | None = None
        self.outputs: dict[str, dict[str, np.ndarray]] = {}
        self.gate = TimingGate(opts.jobs)
        self.readable = confine.readable(model.path, workdir, opts.cache_dir)
        #: a session's services (``engine/session.py``: several checks share them), else the check's own
        self.services = services or Services(confine.shared(opts.sandbox, self.readable))
        self._own_services = services is None
        #: the source's own runtime, targets without a converter route (id -> why), each target's plan
        self.reference, self.no_route, self.plans = REFERENCE, {}, {}
        self._runtimes: dict[str, Any] = {}

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

    def _release(self, lease, wr: WorkerResult) -> None:
        """A target that hung, crashed or lost its page may leave the service unwell: later targets get a
        fresh one, and this one stops when no running target uses it."""
        unwell = wr.status in ("timeout", "crashed") or "crash" in (wr.error or "")
        self.services.release(lease, unwell=unwell)

    def prestart(self, targets: list[Target]) -> None:
        """The shared services the available ones of these targets use start now, beside the reference run."""
        self.services.prestart({self._runtime(t).service for t in targets
                                if t.id not in self.no_route and availability(t).ok})

    def close(self) -> None:
        if self._own_services:
            self.services.close()

    def run_all(self, targets: list[Target]) -> list[TargetResult]:
        """Every target, costliest first, ``jobs`` working at once and loaded ones parked to time
        (``workers/schedule.py``); the results in the order of ``targets``."""
        order = by_cost(targets, lambda t: self._runtime(t).cost)
        self.gate.plan([(t.id, self._runtime(t).contends) for t in order])
        pool = ThreadPoolExecutor(max_workers=min(len(order), self.gate.threads()) or 1)
        try:
            done = dict(zip((t.id for t in order), pool.map(self.run, order)))
        except BaseException:  # Ctrl-C: stop every worker (they run in sessions of their own)
            kill_all()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        return [done[t.id] for t in targets]

    def job(self, target: Target, services: dict[str, str] | None = None, wdir: Path | None = None) -> Job:
        o = self.opts
        return Job(services=dict(services or {}),
                   sandbox=confine.worker(o.sandbox, self.readable, wdir, o.cache_dir, o.use_cache,
                                          self._runtime(target).network, dict(services or {})) if wdir else {},
                   target=target, source=self.model.artifact(), signature=self.model.signature(),
                   feeds=str(self.feeds_file), feeds_source=self.feeds.source, input_names=self.in_names,
                   output_names=self.out_names, warmup=o.warmup, runs=o.runs, time_budget_s=o.time_budget_s,
                   cache_dir=str(o.cache_dir) if o.cache_dir else None, use_cache=o.use_cache,
                   convert_timeout_s=o.limits.convert_timeout_s, input_shapes=self.input_shapes, check_id=self.check_id,
                   extra_feeds=str(self.robustness.file) if self.robustness and self.robustness.set.groups else "",
                   extra_clean=self.robustness.set.batches if self.robustness else 0,
                   run_timeout_s=self.limits(target).run_timeout_s)

    def limits(self, target: Target) -> Limits:
        """The check's limits, with the target's own run time limit unless the user set one."""
        limits = self.opts.limits
        if target.run_timeout_s and not self.opts.timeout_explicit:
            limits = Limits(limits.convert_timeout_s, target.run_timeout_s, limits.memory_mb)
        return limits

    def thresholds_for(self, target: Target) -> dict:
        """The target's bounds, loosened to a quantized model's where the model is quantized already, then
        the user's."""
        base = target.thresholds
        if self.quantized and target.id != self.reference:
            base = thresholds.looser(thresholds.merged(base), thresholds.merged(self.quantized))
        return thresholds.merged(base, self.opts.thresholds, self.opts.target_thresholds.get(target.id))

    def quantized_note(self) -> list[str]:
        if not self.quantized:
            return []
        q = self.quantized
        return [f"the model is quantized already ({quantization(self.model.quantized_ops)}: "
                f"{', '.join(self.model.quantized_ops)}): every target is judged as a quantized model is, like the TFLite "
                f"int8 variants (cosine >= {q['cosine']}, top-1 agreement >= {q['top1_agreement']}, max_abs reported "
                "but not judged), since runtimes' integer kernels round differently"]

    def run(self, target: Target, skip_reason: str | None = None) -> TargetResult:
        try:
            return self._run(target, skip_reason)
        finally:
            self.gate.withdraw(target.id)  # skipped, or failed before its start: the others need not wait

    def _run(self, target: Target, skip_reason: str | None) -> TargetResult:
        self.progress.target_started(target)
        t0 = time.monotonic()
        skip_reason = skip_reason or self.no_route.get(target.id)
        avail = None if skip_reason else availability(target)
        if skip_reason or not avail.ok:
            v = verdict.skipped(target, self.opts.gate)
            res = TargetResult(id=target.id, platform=target.platform, status=v.status, gating=v.gating,
                               error=skip_reason or avail.reason, hint=None if skip_reason else avail.hint,
                               metrics=metrics.empty(), thresholds=self.thresholds_for(target))
        else:
            limits = self.limits(target)
            wdir = self.workdir / target.id.replace("/", "__")
            log.debug("%s: queued", target.id)
            self.gate.admit(target.id)
            try:
                log.debug("%s: admitted", target.id)
                services, lease = self._lease(target)
                wr = run_worker(self.job(target, services, wdir), wdir, limits,
                                lambda ph: self.progress.target_phase(target, ph.value), gate=self.gate)
                self._release(lease, wr)
            finally:
                self.gate.finished(target.id)  # whatever happened, it no longer holds the others' timing
            res = self.evaluate(target, wr, wdir)
        res = replace(res, duration_s=round(time.monotonic() - t0, 3))
        self.progress.target_done(res)
        return res

    def _details(self, wr: WorkerResult) -> dict:
        details = dict(wr.details)
        if wr.conversions:
            details["conversions"] = [c.to_dict() for c in wr.conversions]
        for k in ("backend_requested", "backend_used"):
            if getattr(wr, k):
                details[k] = getattr(wr, k)
        if wr.emulated:
            details["emulated"] = True
        if wr.caveat:
            details["caveat"] = wr.caveat
        if wr.phases_s:
            details["phases_s"] = wr.phases_s
        if not wr.ok and wr.status in ("crashed", "timeout", "run-error", "load-error", "convert-error"):
            tail = log_tail(Path(wr.log)) if wr.log else []
            if tail:
                details["log_tail"] = tail
        return details

    def evaluate(self, target: Target, wr: WorkerResult, wdir: Path) -> TargetResult:
        t = self.thresholds_for(target)
        is_ref = target.id == self.reference
        outs = load_outputs(wdir / "outputs.npz", self.out_names) if wr.ok else {}
        if is_ref and wr.ok:
            self.score_name = self.opts.scores_output or acc.score_output(outs)
        rob = self.robustness
        extra = load_outputs(wdir / "extra_outputs.npz", self.out_names) if wr.ok and rob else {}
        ref, labels, cut = self.ref_outputs, self.feeds.labels, (wr.details or {}).get("samples")
        ref_metrics = self.ref_metrics
        if cut and not is_ref:  # a slow target compared the first batches only: so is the reference
            ref = {n: v[:cut["batches"]] for n, v in ref.items()}
            labels = labels[:cut["batches"]] if labels is not None and len(labels) == cut["of"] else labels
            ref_metrics = dict(ref_metrics, accuracy=acc.accuracy(ref, labels, self.score_name))
        ev = Evaluation(worker=wr, outputs=outs, reference=None if is_ref else ref,
                        output_names=self.out_names, labels=labels, score_name=self.score_name,
                        reference_metrics=ref_metrics, perturbed=rob.set if rob else None, perturbed_outputs=extra,
                        reference_perturbed=None if is_ref else self.ref_perturbed,
                        adversarial=rob.adversarial if rob else None)
        if wr.ok:
            self.outputs[target.id] = outs
            m, problems = metrics.evaluate(ev)
            found = None if is_ref else problems + metrics.breaches(m, t)
        else:
            m, found = dict(metrics.empty(), latency_ms=summarize(wr.latency), peak_rss_mb=wr.peak_rss_mb), None
        v = verdict.decide(target, self.opts.gate, wr, found)
        if is_ref and wr.ok:
            self.ref_outputs, self.ref_metrics, self.ref_perturbed = outs, m, extra
        return TargetResult(id=target.id, platform=target.platform, status=v.status, gating=v.gating,
                            runtime=wr.runtime, device=wr.device, error=wr.error, hint=wr.hint, op=wr.op, node=wr.node,
                            artifact=wr.artifact, metrics=m, thresholds=t, breaches=v.breaches, notes=v.notes + samples_note(wr.details) + timing_note(m) + artifact_notes(wr.details),
                            details={**self._details(wr), **({"plan": self.plans[target.id]} if target.id in self.plans else {})})

    def odd_one_out(self, results: list[TargetResult], targets: list[Target]) -> list[str]:
        """Independent runtimes that agree with each other but not with the reference name it.

        Witnesses must be independent: targets that run one converted model (the same first conversion
        after the snapshot, e.g. one onnx2tf SavedModel) count once, and a runtime with a known caveat
        (onnx.reference's wrong kernels) is no witness."""
        lineage = {t.id: (t.converters[1][0] if len(t.converters) > 1 else t.id) for t in targets}
        drifted = [r for r in results if r.status == "drift" and r.id in self.outputs and r.id != self.reference
                   and not r.details.get("caveat")]
        agreeing: list[str] = []
        for i, a in enumerate(drifted):
            for b in drifted[i + 1:]:
                per, agreement, problems = drift.compare(self.outputs[a.id], self.outputs[b.id])
                if not problems and not drift.breaches({"outputs": per, "top1_agreement": agreement}, thresholds.DEFAULTS):
                    agreeing += [x for x in (a.id, b.id) if x not in agreeing]
        if len({lineage.get(x, x) for x in agreeing}) >= 2:
            return [f"{', '.join(agreeing)} agree with each other but not with the reference {self.reference}: "
                    "the reference may be the odd one out"]
        return []


def _versions(targets: list[Target], opts: CheckOptions, progress) -> tuple[list[Target], dict, dict]:
    """The targets with one more per asked version of a package they use (``--versions``), and for each
    versioned target a version that could not be installed (its skip reason)."""
    if not opts.versions:
        return targets, {}, {}
    from portability.core.dirs import default_root

    say = getattr(progress, "note", None) or (lambda s: log.info("%s", s))
    return versions.expand(targets, opts.versions, Path(opts.cache_dir) if opts.cache_dir else default_root(), say)


def _provenance(feeds: inp.Feeds, opts: CheckOptions) -> dict:
    """What the targets ran on: the digest of the feeds themselves, and where they came from."""
    from portability.report.golden import digest

    path = opts.dataset or opts.inputs
    return {"digest": digest(feeds.arrays), "source": feeds.source, "seed": feeds.seed,
            "shapes": {k: list(v.shape[1:]) for k, v in feeds.arrays.items()}, "path": str(path) if path else None}


def check(model_path: str | os.PathLike, opts: CheckOptions, progress: Progress | None = None,
          model: ModelInfo | None = None, kept: dict | None = None, session=None) -> Report:
    """Run a whole check. Raises UsageError (bad model / input / flags) before any target runs. ``kept``
    (a dict) receives what the golden outputs are made of: ``inputs`` (their provenance and digest) and
    ``outputs`` (target id -> output name -> array, of every target that ran). ``session``
    (``engine/session.py``): the shared services and the warm worker pool several checks share; they
    outlive this check."""
    progress = progress or _Silent()
    model = model or load_source_isolated(model_path, sandbox=opts.sandbox, shapes=opts.shapes)
    feeds = prepare_feeds(model, opts)
    targets, no_route, plans = plan.for_check(model.format, opts.targets, opts.via,
                                              overrides=(opts.converter_options, opts.runtime_options))
    verdict.check_gate_rules(targets, opts.gate)
    targets, version_skips, version_info = _versions(targets, opts, progress)
    no_route = {**no_route, **version_skips}
    workdir = Path(tempfile.mkdtemp(prefix="portability-run-"))
    run = rob = None
    try:
        if opts.robustness:
            from portability.metrics.robustness import run as robust

            rob = robust.prepare(model, feeds, opts, workdir)
        run = _Run(model, feeds, opts, workdir, progress, rob, session.services if session else None)
        if session is not None:
            session.readable(run.readable)
        run.reference, run.no_route, run.plans = targets[0].id, no_route, plans
        run.prestart(targets[1:])
        ref = run.run(targets[0])
        results = [ref]
        rest = targets[1:]
        synthesized_failed = inp.failure_help(ref.status, feeds, opts.value_range, model) if ref.status != "pass" else []
        if synthesized_failed:
            ref = results[0] = replace(ref, hint=ref.hint or synthesized_failed[1])
        if ref.status != "pass":
            why = f"the reference {run.reference} did not run ({ref.status}): nothing to compare with"
            results += [run.run(t, skip_reason=why) for t in rest]
        else:
            results += run.run_all(rest)
        notes = (list(feeds.warnings) + run.quantized_note() + synthesized_failed[:1]
                 + run.odd_one_out(results, targets) + verdict.delegate_ab(results, targets))
        matrix = versions.matrix(results, run.outputs, version_info)
        if kept is not None:
            kept.update(inputs=_provenance(feeds, opts), outputs=dict(run.outputs))
    finally:
        if session is None:
            shutdown()  # the pre-imported worker pool
        if run is not None:
            run.close()
        shutil.rmtree(workdir, ignore_errors=True)
    passed = all(not r.failed for r in results if r.gating)
    return Report(
        tool={"name": "portability", "version": portability.__version__},
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        environment=environment(opts.sandbox),
        model=model.to_dict(),
        inputs={"source": feeds.source, "samples": feeds.samples, "batches": feeds.batches, "seed": feeds.seed,
                "path": str(opts.dataset or opts.inputs) if (opts.dataset or opts.inputs) else None,
                "shapes": {k: list(v.shape[1:]) for k, v in feeds.arrays.items()},
                **({"robustness": rob.describe()} if rob is not None else {})},
        reference=targets[0].id,
        targets=tuple(results),
        passed=passed,
        notes=tuple(notes),
        versions=matrix,
    )
