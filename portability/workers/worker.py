"""The worker: one target, in its own process. ``python -m portability.workers.worker JOB.json``.

It converts (through the cache), loads, runs every input batch, times, and writes a
:class:`~portability.core.protocol.WorkerResult` (``result.json``) and the outputs (``save_outputs``).
Phase changes go to the parent as JSON lines on the original stdout; everything libraries print goes to
stderr (the parent keeps it in a log file). The parent enforces time and memory limits and turns a dead
worker into ``timeout``/``crashed``.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from portability.core import sandbox
from portability.core.protocol import ConversionStep, Job, Phase, WorkerResult
from portability.core.status import Status


class _Events:
    def __init__(self, fd: int):
        self._f = os.fdopen(fd, "w", buffering=1)

    def phase(self, phase: Phase, **extra) -> None:
        self._f.write(json.dumps({"phase": phase.value, "t": time.time(), **extra}) + "\n")
        self._f.flush()


def _batch(feeds: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    """Batch ``i`` of the stacked feeds, as arrays (a 0-d input stays a 0-d array, not a numpy scalar)."""
    return {k: np.asarray(v[i]) for k, v in feeds.items()}


class Elsewhere(Exception):
    """A conversion this worker leaves to a worker of another pool (``_made_here``): it stops, and the runner runs
    the job again in that pool."""

    def __init__(self, pool: str):
        super().__init__(pool)
        self.pool = pool


def _made_here(job: Job, conv) -> None:
    """Raise Elsewhere where a step this worker is to make is made in a worker of its own pool: where that pool has
    a zygote of its own here (``Job.pools``), and it or this worker's sets an environment of its own (TensorFlow
    without oneDNN's rewrites, for the TF.js converter), so that each step runs as in every check, forked where its
    imports are."""
    mine = job.pool if job.pool in job.pools else ""
    if conv.pool in job.pools and conv.pool != mine and (job.pools[conv.pool] or job.pools.get(mine, False)):
        raise Elsewhere(conv.pool)


class _Progress:
    """What a job has produced so far: its result is built from this, whatever phase it stopped in."""

    def __init__(self):
        self.phase = Phase.CONVERT
        self.conversions: list[ConversionStep] = []
        self.fields: dict[str, Any] = {}
        self.details: dict[str, Any] = {}


def _convert(job: Job, feeds: dict[str, np.ndarray], events: _Events, p: _Progress, cache):
    from portability.core.target import load_class
    from portability.workers.cache import convert_context

    ctx = convert_context(job, feeds)
    art = job.source
    for conv_path, options in job.target.converters:
        conv = load_class(conv_path)()
        events.phase(Phase.CONVERT, step=conv.name())
        t0 = time.perf_counter()

        def blocked(waiting: bool, step: str = conv.name()) -> None:
            events.phase(Phase.BLOCKED if waiting else Phase.CONVERT, step=step)

        art, hit = cache.convert(conv, art, options, ctx, on_wait=blocked, before=lambda c=conv: _made_here(job, c))
        p.conversions.append(ConversionStep(f"{conv.name()} {conv.version()}", hit, round(time.perf_counter() - t0, 3),
                                            conv.shapes_used(ctx)))
    p.fields["artifact"] = {"format": art.format, "sha256": art.sha256, **art.size_info()}
    if art.meta:
        p.details["artifact_meta"] = art.meta
    return art


def _run(job: Job, runtime, feeds: dict[str, np.ndarray], events: _Events, p: _Progress) -> dict[str, Any]:
    """Every batch once (outputs saved), then the timing plan; returns the raw latency record."""
    from portability.core.protocol import save_outputs
    from portability.metrics.latency import (MIN_RUNS, SLOW_BUDGET_S, SLOW_MIN_RUNS, SLOW_SAMPLE_BUDGET_S, sample_count,
                                             timing_plan)

    nb = next(iter(feeds.values())).shape[0]
    extra = _extra_batches(job)
    t = job.target
    slow = runtime.device == "software" or runtime.emulated  # its speed is no device's
    events.phase(Phase.INFER, batches=nb + len(extra))
    batches = [_batch(feeds, i) for i in range(nb)]
    t0 = time.perf_counter()
    results = [runtime.infer(batches[0])]
    first_ms = (time.perf_counter() - t0) * 1e3
    # a slow inference compares fewer batches (the report says how many; the engine compares those only): within
    # the target's own budget (an emulator's, a software adapter's), else the check's (0: every batch)
    own = t.sample_budget_s if t.sample_budget_s is not None else (SLOW_SAMPLE_BUDGET_S if slow else None)
    sample_budget = own if own is not None else (job.sample_budget_s or None)
    k, pace_ms = sample_count(first_ms, nb, sample_budget), first_ms
    # the first inference may pay for compiling shaders or warming up a JIT: where the pace decides something
    # (fewer batches, or no robustness pass), the second sets it — unless the first alone overran the budget:
    # then it is the one batch compared (a second would cost as much again, over the budget either way)
    over = bool(sample_budget) and first_ms >= sample_budget * 1e3
    if nb > 1 and not over and (k < nb or _too_long(job, first_ms, len(extra))):
        t0 = time.perf_counter()
        results.append(runtime.infer(batches[1]))
        pace_ms = (time.perf_counter() - t0) * 1e3
        k = max(2, sample_count(pace_ms, nb, sample_budget))
    if k < nb:
        p.details["samples"] = {"batches": k, "of": nb, "budget_s": sample_budget, "first_ms": round(first_ms, 1),
                                "pace_ms": round(pace_ms, 1)}
    extra = _robustness_fits(job, extra, k, pace_ms, p)
    t0 = time.perf_counter()
    rest = batches[len(results):k] + extra  # one call: a page or an emulator gets every batch at once
    results += runtime.infer_all(rest) if rest else []
    # what one inference costs, to fit the timing into its budget: the later batches' mean, else the first
    per_ms = (time.perf_counter() - t0) * 1e3 / len(rest) if rest else pace_ms
    if extra:
        save_outputs(results[k:], Path(job.extra_outputs), job.output_names)
    save_outputs(results[:k], Path(job.outputs), job.output_names)

    p.phase = Phase.TIME
    latency: dict[str, Any] = {"first": round(first_ms or 0.0, 4)}
    untimed = runtime.untimed()
    if untimed and not job.time_emulated and job.runs:  # compared above; its speed is no device's: not timed
        latency["skipped"] = untimed
        return latency
    budget = t.time_budget_s if t.time_budget_s is not None else job.time_budget_s
    if slow:  # a short look suffices, and one run where one inference is slow
        budget = min(budget, SLOW_BUDGET_S) if budget else SLOW_BUDGET_S
    min_runs = t.min_runs if t.min_runs is not None else (SLOW_MIN_RUNS if slow else MIN_RUNS)
    plan = timing_plan(per_ms, job.warmup, job.runs, budget, min_runs)
    latency.update(plan.record())
    if plan.runs > 0:
        runtime.pace_ms = per_ms
        runtime.warm_up(_batch(feeds, 0), plan.warmup)
        events.phase(Phase.WAIT)
        sys.stdin.readline()  # the parent's go: nothing else runs now (EOF: no parent gate, go at once)
        events.phase(Phase.TIME, runs=plan.runs)
        ms, latency["stopped"] = _time_chunks(runtime, _batch(feeds, 0), plan, min_runs, budget)
        events.phase(Phase.CLOSE)  # the timing slot is free: closing the runtime needs no quiet machine
        latency["samples"] = [round(x, 5) for x in ms]
    return latency


def _generate(job: Job, runtime, events: _Events, p: _Progress, encoder=None) -> None:
    """Greedy decoding on this target's runtime, one inference a step (``core/generate.py``): free-running, then
    fed the reference's tokens (teacher forcing) where the job has them. The tokens and each step's logits go to
    ``generation.npz`` beside the outputs; a step the runtime refuses (a cache it cannot grow: a graph converted
    at fixed shapes) is the target's run error, naming the step. An encoder-decoder's ``encoder`` (its artifact,
    converted for this target) runs once first, on the prompt; the decoder starts from its start token."""
    from portability.core.decoder import layout_of
    from portability.core.errors import RunError
    from portability.core.model import TensorSpec

    spec = job.generate
    ins = tuple(TensorSpec.from_dict(t) for t in job.signature.get("inputs", []))
    outs = tuple(TensorSpec.from_dict(t) for t in job.signature.get("outputs", []))
    lay = layout_of(ins, outs)
    if lay is None:
        raise RunError("--generate: the model is not a causal language model's decoder (input_ids with past "
                       "key/value inputs or present outputs, in Optimum's layout)")
    events.phase(Phase.INFER, generate=spec["steps"])
    context = _encode(job, encoder, lay, p) if encoder is not None else None
    prompt = [int(spec["start"])] if context is not None else list(spec["prompt"])
    free = runtime.decode(lay, ins, prompt, int(spec["steps"]), context=context)
    arrays = {"tokens": np.asarray(free.tokens, np.int64), "logits": np.stack(free.logits)}
    teacher = spec.get("teacher")
    if teacher:
        forced = runtime.decode(lay, ins, prompt, len(teacher), teacher=list(teacher), context=context)
        arrays.update(forced_tokens=np.asarray(forced.tokens, np.int64), forced_logits=np.stack(forced.logits))
    np.savez(Path(job.outputs).with_name("generation.npz"), **arrays)
    p.details["generation"] = {"loop": runtime.decodes_where(context), "steps": len(free.tokens), "ttft_ms": _r(free.ttft_ms),
                               "tokens_per_s": _r(free.tokens_per_s), "step_ms": [_r(x) for x in free.step_ms],
                               **({"encoder": p.details.pop("encoder")} if "encoder" in p.details else {})}


def _encoder_feeds(job: Job) -> dict[str, np.ndarray]:
    """The encoder's inputs for ``--generate``'s prompt: its ids and a mask of ones, one row."""
    enc = job.generate["encoder"]
    dtypes = {t["name"]: t["dtype"] for t in enc["signature"]["inputs"]}
    ids = np.asarray([job.generate["prompt"]], dtypes.get(enc["ids"], "int64"))
    return {enc["ids"]: ids, **({enc["mask"]: np.ones(ids.shape, dtypes.get(enc["mask"], "int64"))} if enc["mask"] else {})}


def _convert_encoder(job: Job, events: _Events, p: _Progress, cache):
    """An encoder-decoder's encoder (``--generate``), converted for this target by its converters (the cache)."""
    from dataclasses import asdict, replace

    from portability.core.artifact import Artifact

    enc = job.generate["encoder"]
    sub = _Progress()
    feeds = {k: v[None] for k, v in _encoder_feeds(job).items()}  # one batch
    art = _convert(replace(job, source=Artifact.from_dict(enc["source"]), signature=enc["signature"], input_shapes={}),
                   feeds, events, sub, cache)
    p.details["encoder"] = {"artifact": sub.fields.get("artifact"), "conversions": [asdict(c) for c in sub.conversions]}
    return art


def _encode(job: Job, art, lay, p: _Progress) -> dict[str, np.ndarray]:
    """The encoder run once on this target's runtime (a runtime of its own): the decoder's fixed feeds."""
    from portability.core.errors import RunError
    from portability.core.target import load_class

    enc = job.generate["encoder"]
    rt = load_class(job.target.runtime)(job.target.options)
    rt.services, rt.strict_backend, rt.check_id = dict(job.services), job.strict_backend, job.check_id
    t0 = time.perf_counter()
    try:
        rt.load(art)
        out = rt.infer(_encoder_feeds(job))
    finally:
        rt.close()
    if enc["states"] not in out:
        raise RunError(f"--generate: the encoder returned no '{enc['states']}' (it returned {', '.join(out)})")
    p.details.setdefault("encoder", {})["ms"] = _r((time.perf_counter() - t0) * 1e3)
    states = np.asarray(out[enc["states"]], np.float32)
    ctx = {lay.states: states}
    if lay.states_mask:
        ctx[lay.states_mask] = np.ones(states.shape[:2], np.int64)
    return ctx


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def _time_chunks(runtime, batch: dict[str, np.ndarray], plan, min_runs: int, budget: float | None) -> tuple[list[float], str]:
    """Timed runs in chunks (the first one warms up) until the median is stable, ``plan.runs`` are taken or
    the time budget is spent (``metrics/latency.next_chunk``): every chunk's milliseconds, and why it stopped."""
    from portability.metrics.latency import first_chunk, next_chunk

    ms: list[float] = []
    n, taken, stopped, t0 = first_chunk(plan.runs, min_runs), 0, None, time.perf_counter()
    while n:
        ms += runtime.time(batch, 0 if taken else plan.warmup, n)
        taken += n
        n, stopped = next_chunk(ms, taken, plan.runs, budget, (time.perf_counter() - t0) * 1e3, plan.asked is not None)
    return ms, stopped or "runs"


def _robustness_fits(job: Job, extra: list, k: int, pace_ms: float, p: _Progress) -> list:
    """The extra (robustness) batches this target runs: none when it compared fewer clean samples than they
    perturb (nothing of its own to compare them with), or when at its pace they would take over half its
    run time limit (the check would lose the target to a timeout); the report says why."""
    if not extra:
        return extra
    if k < job.extra_clean:
        why = f"so this target compared {k} of the {job.extra_clean} samples the robustness pass perturbs"
    elif _too_long(job, pace_ms, len(extra)):
        why = f"over half of this target's {job.run_timeout_s:g} s run time limit"
    else:
        return extra
    p.details["robustness_skipped"] = (f"not measured: one inference takes {pace_ms / 1e3:.3g} s here, {why} (its "
                                       f"{len(extra)} perturbed inputs, at that pace: about {pace_ms * len(extra) / 1e3:.0f} s)")
    return []


def _too_long(job: Job, pace_ms: float, n_extra: int) -> bool:
    """Whether ``n_extra`` inferences at ``pace_ms`` would take over half the worker's run time limit."""
    return bool(n_extra and job.run_timeout_s and pace_ms * n_extra / 1e3 > job.run_timeout_s / 2)


def _extra_batches(job: Job) -> list[dict[str, np.ndarray]]:
    if not job.extra_feeds:
        return []
    from portability.core.protocol import load_feeds

    extra = load_feeds(Path(job.extra_feeds), job.input_names)
    return [_batch(extra, i) for i in range(next(iter(extra.values())).shape[0])]


def run_job(job: Job, events: _Events) -> WorkerResult:
    from portability.core.errors import TargetError, Unavailable
    from portability.core.protocol import load_feeds
    from portability.core.target import load_class
    from portability.workers.cache import Cache

    p = _Progress()
    runtime = None
    cache = None
    try:
        feeds = load_feeds(Path(job.feeds), job.input_names)
        cache = Cache(Path(job.cache_dir) if job.cache_dir else None, use=job.use_cache,
                      scratch_parent=Path.cwd(), scope=job.check_id)  # the run's folder: removed by the parent even if we are killed
        art = _convert(job, load_feeds(Path(job.calibration), job.input_names) if job.calibration else feeds, events, p, cache)
        encoder = _convert_encoder(job, events, p, cache) if job.generate.get("encoder") else None
        sandbox.narrow(sandbox.Sandbox.from_dict(job.sandbox))  # converted: the cache is no longer writable

        p.phase = Phase.LOAD
        events.phase(Phase.LOAD)
        runtime = load_class(job.target.runtime)(job.target.options)
        runtime.services = dict(job.services)
        runtime.strict_backend = job.strict_backend
        runtime.check_id = job.check_id
        t0 = time.perf_counter()
        runtime.load(art)
        load_ms = (time.perf_counter() - t0) * 1e3
        p.fields.update(runtime=runtime.describe(), device=runtime.device, backend_requested=runtime.backend_requested(),
                        backend_used=runtime.backend_used(), emulated=runtime.emulated, caveat=runtime.caveat)

        p.phase = Phase.INFER
        latency = {"load": round(load_ms, 4), **_run(job, runtime, feeds, events, p)}
        if job.generate:
            _generate(job, runtime, events, p, encoder)
        latency.update({k: round(float(v), 4) for k, v in runtime.load_timings().items()})
        p.details.update(runtime.details())
        p.fields.update(latency=latency, backend_used=runtime.backend_used(), output_quant=runtime.output_quant())
        status, error = "ok", None
    except Elsewhere as e:  # no outcome yet: the runner runs the job again in that pool
        status, error = "ok", None
        p.fields["again_in"] = e.pool
    except TargetError as e:
        status = Status.CONVERT_ERROR if p.phase is Phase.CONVERT and e.status == Status.RUN_ERROR else e.status
        error = str(e)
        p.fields.update(op=e.op, node=e.node, **({"hint": e.hint} if isinstance(e, Unavailable) else {}))
    except Exception as e:  # an unexpected exception is still this target's failure, in its phase
        status = {Phase.CONVERT: Status.CONVERT_ERROR, Phase.LOAD: Status.LOAD_ERROR}.get(p.phase, Status.RUN_ERROR)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        error = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
        traceback.print_exc()
    finally:
        if runtime is not None:
            try:
                runtime.close()
            except Exception:
                traceback.print_exc()
        if cache is not None:
            cache.close()
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ruc = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return WorkerResult(status=status, error=error, conversions=tuple(p.conversions), details=p.details,
                        peak_rss_mb=round(max(ru, ruc), 1), **p.fields)


def _confine(job: Job) -> None:
    """Enter the job's OS sandbox (``core.sandbox``) before anything reads the model: a private temporary
    folder in the worker's own folder, then the confinement. Required and impossible: the worker stops."""
    sb = sandbox.Sandbox.from_dict(job.sandbox)
    if not job.sandbox or sb.mode == "off":
        return
    tmp = Path.cwd() / "tmp"
    tmp.mkdir(exist_ok=True)
    os.environ.update(sandbox.private_env(dict(os.environ), tmp))
    tempfile.tempdir = None
    try:
        why = sandbox.enter(sb)
    except sandbox.SandboxError as e:
        print(str(e), file=sys.stderr)
        os._exit(70)
    if why:
        print(f"not sandboxed: {why}", file=sys.stderr)


def main(argv: list[str]) -> NoReturn:
    job_path = Path(argv[0])
    job = Job.from_dict(json.loads(job_path.read_text()))
    events_fd = os.dup(1)
    os.dup2(2, 1)  # library chatter on stdout goes to the log, not into the event stream
    sys.stdout = os.fdopen(1, "w", buffering=1)
    events = _Events(events_fd)
    events.phase(Phase.START, pid=os.getpid())
    _confine(job)
    result = run_job(job, events)
    tmp = Path(job.result).with_suffix(".tmp")
    tmp.write_text(json.dumps(result.to_dict()))
    os.replace(tmp, job.result)
    events.phase(Phase.DONE)
    # the result is written and the runtime closed: exit now. An interpreter's teardown after TensorFlow
    # or torch takes seconds of CPU, which would overlap the next target's timing
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
