"""The worker: one target, in its own process. ``python -m portability.core.worker JOB.json``.

It converts (through the cache), loads, runs every input batch, times, and writes ``result.json`` and
the outputs (``out0, out1, ...`` in an .npz). Phase changes go to the parent as JSON lines on the
original stdout; everything libraries print goes to stderr (the parent keeps it in a log file). The
parent enforces time and memory limits and turns a dead worker into ``timeout``/``crashed``.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

import numpy as np


class _Events:
    def __init__(self, fd: int):
        self._f = os.fdopen(fd, "w", buffering=1)

    def phase(self, name: str, **extra) -> None:
        self._f.write(json.dumps({"phase": name, "t": time.time(), **extra}) + "\n")
        self._f.flush()


def _batch(feeds: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    """Batch ``i`` of the stacked feeds, as arrays (a 0-d input stays a 0-d array, not a numpy scalar)."""
    return {k: np.asarray(v[i]) for k, v in feeds.items()}


def run_job(job: dict, events: _Events) -> dict:
    from portability.converters.base import ConvertContext
    from portability.core.artifact import Artifact, size_info
    from portability.core.cache import Cache
    from portability.core.errors import TargetError, Unavailable
    from portability.core.inputs import load_feeds
    from portability.metrics.latency import MIN_RUNS, timing_plan
    from portability.targets.base import Target, load_class

    target = Target.from_dict(job["target"])
    in_names, out_names = job["input_names"], job["output_names"]
    result: dict = {"status": "ok", "error": None, "conversions": [], "details": {}}
    phase = "convert"
    runtime = None
    cache = None
    try:
        feeds = load_feeds(Path(job["feeds"]), in_names)
        samples = {k: v.reshape((-1,) + v.shape[2:]) if v.ndim >= 2 else v for k, v in feeds.items()}
        ctx = ConvertContext(calibration=samples, calibration_source=job.get("feeds_source"),
                             timeout_s=job.get("convert_timeout_s"), input_shapes=job.get("input_shapes") or None)
        cache = Cache(Path(job["cache_dir"]) if job.get("cache_dir") else None, use=job.get("use_cache", True),
                      scratch_parent=Path.cwd())  # the run's folder: removed by the parent even if we are killed
        art = Artifact.from_dict(job["source"])
        for conv_path, options in target.converters:
            conv = load_class(conv_path)()
            events.phase("convert", step=conv.name())
            t0 = time.perf_counter()
            art, hit = cache.convert(conv, art, options, ctx)
            step = {"converter": f"{conv.name()} {conv.version()}", "cached": hit,
                    "seconds": round(time.perf_counter() - t0, 3)}
            if conv.shapes_used(ctx):
                step["input_shapes"] = conv.shapes_used(ctx)
            result["conversions"].append(step)
        result["artifact"] = {"format": art.format, "sha256": art.sha256, **size_info(art.files())}
        if art.meta:
            result["details"]["artifact_meta"] = art.meta

        phase = "load"
        events.phase("load")
        runtime = load_class(target.runtime)(target.options)
        t0 = time.perf_counter()
        runtime.load(art)
        load_ms = (time.perf_counter() - t0) * 1e3
        result["runtime"] = runtime.describe()
        result["device"] = runtime.device
        result["backend_requested"] = runtime.backend_requested()
        result["backend_used"] = runtime.backend_used()

        phase = "infer"
        nb = next(iter(feeds.values())).shape[0]
        events.phase("infer", batches=nb)
        batches = [_batch(feeds, i) for i in range(nb)]
        t0 = time.perf_counter()
        results = [runtime.infer(batches[0])]
        first_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        results += runtime.infer_all(batches[1:]) if nb > 1 else []
        # what one inference costs, to fit the timing into its budget: the later batches' mean, else the first
        per_ms = (time.perf_counter() - t0) * 1e3 / (nb - 1) if nb > 1 else first_ms
        outs: dict[str, list[np.ndarray]] = {n: [np.asarray(r[n]) for r in results if n in r] for n in out_names}
        saved = {}
        for j, n in enumerate(out_names):
            if len({o.shape for o in outs[n]}) == 1 and len(outs[n]) == nb:
                saved[f"out{j}"] = np.stack(outs[n])
            elif len(outs[n]) == nb:  # the shape varies with the input (NonZero, NMS...): one array per batch
                saved.update({f"out{j}.{i}": o for i, o in enumerate(outs[n])})
        np.savez(job["outputs"], **saved)

        phase = "time"
        latency: dict = {"load": round(load_ms, 4), "first": round(first_ms or 0.0, 4)}
        budget = target.time_budget_s if target.time_budget_s is not None else job.get("time_budget_s")
        plan = timing_plan(per_ms, int(job.get("warmup", 10)), int(job.get("runs", 50)), budget,
                           target.min_runs if target.min_runs is not None else MIN_RUNS)
        latency.update(plan.record())
        if plan.runs > 0:
            events.phase("time", runs=plan.runs)
            ms = runtime.time(_batch(feeds, 0), plan.warmup, plan.runs)
            latency["samples"] = [round(x, 5) for x in ms]
        extra = getattr(runtime, "load_timings", None)
        if extra:
            latency.update({k: round(float(v), 4) for k, v in extra().items()})
        result["latency"] = latency
        result["details"].update(runtime.details())
        result["backend_used"] = runtime.backend_used()
    except TargetError as e:
        status = e.status
        if phase == "convert" and status == "run-error":
            status = "convert-error"
        if isinstance(e, Unavailable):
            result["hint"] = e.hint
        result.update(status=status, error=str(e), op=e.op, node=e.node)
    except Exception as e:  # an unexpected exception is still this target's failure, in its phase
        status = {"convert": "convert-error", "load": "load-error"}.get(phase, "run-error")
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        result.update(status=status, error=f"{type(e).__name__}: {msg}" if msg else type(e).__name__)
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
    result["peak_rss_mb"] = round(max(ru, ruc), 1)
    return result


def main(argv: list[str]) -> int:
    job_path = Path(argv[0])
    job = json.loads(job_path.read_text())
    events_fd = os.dup(1)
    os.dup2(2, 1)  # library chatter on stdout goes to the log, not into the event stream
    sys.stdout = os.fdopen(1, "w", buffering=1)
    events = _Events(events_fd)
    events.phase("start", pid=os.getpid())
    result = run_job(job, events)
    tmp = Path(job["result"]).with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, job["result"])
    events.phase("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
