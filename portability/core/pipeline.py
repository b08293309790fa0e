"""The check: model -> feeds -> reference -> every target in its worker -> metrics -> Report."""
from __future__ import annotations

import logging
import os
import platform
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

import numpy as np

import portability
from portability.core import inputs as inp
from portability.core.errors import UsageError
from portability.core.model import ModelInfo, load_model_isolated
from portability.core.runner import Limits, kill_all, log_tail, run_worker
from portability.metrics import accuracy as acc
from portability.metrics import drift, thresholds
from portability.metrics.latency import summarize
from portability.report.schema import Report, TargetResult
from portability.targets import REFERENCE, Target, availability, expand, registry

log = logging.getLogger(__name__)

ENV_PACKAGES = ("numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "tensorflow-cpu", "ai-edge-litert", "onnx2tf",
                "tensorflowjs", "playwright", "torch")


@dataclass
class CheckOptions:
    targets: str = "server"
    inputs: Path | None = None
    dataset: Path | None = None
    shapes: list[str] = field(default_factory=list)
    samples: int | None = None
    seed: int = 0
    value_range: tuple[float, float] = (0.0, 1.0)
    warmup: int = 10
    runs: int = 50
    #: seconds a target's latency sampling may take; a slow target gets fewer runs (the report says)
    time_budget_s: float = 20.0
    limits: Limits = field(default_factory=Limits)
    #: global threshold overrides, then per-target ones ({target id: {name: bound}}) — user settings
    thresholds: dict = field(default_factory=dict)
    target_thresholds: dict = field(default_factory=dict)
    #: "+id"/"id" makes a target (or platform) gating, "-id" a cross-check
    gate: list[str] = field(default_factory=list)
    #: the user set the run time limit: it then applies also to targets with a limit of their own
    timeout_explicit: bool = False
    use_cache: bool = True
    cache_dir: Path | None = None
    jobs: int = 1


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


def apply_gate(targets: list[Target], gate: list[str]) -> list[Target]:
    from dataclasses import replace

    known = {t.id for t in targets} | {t.platform for t in targets} | {"all"}
    for rule in gate:
        if rule.lstrip("+-") not in known:
            raise UsageError(f"--gate names '{rule.lstrip('+-')}', which is not among the targets of this check")
    out = []
    for t in targets:
        g = t.gating
        for rule in gate:
            neg = rule.startswith("-")
            name = rule.lstrip("+-")
            if name in (t.id, t.platform, "all"):
                g = not neg
        out.append(replace(t, gating=g) if g != t.gating else t)
    return out


def environment() -> dict:
    from importlib.metadata import PackageNotFoundError, version

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
    return {"python": platform.python_version(), "platform": platform.platform(), "cpu": cpu,
            "cores": os.cpu_count(), "packages": pkgs}


def _load_outputs(path: Path, names: list[str]) -> dict[str, np.ndarray | list[np.ndarray]]:
    """Outputs stacked over batches, or a list of per-batch arrays where the shape varies."""
    if not path.is_file():
        return {}
    out: dict[str, np.ndarray | list[np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as z:
        for i, n in enumerate(names):
            if f"out{i}" in z.files:
                out[n] = z[f"out{i}"]
            else:
                parts = sorted((int(k.rsplit(".", 1)[1]), k) for k in z.files if k.startswith(f"out{i}."))
                if parts:
                    out[n] = [z[k] for _, k in parts]
    return out


def _empty_metrics() -> dict:
    return {"outputs": {}, "top1_agreement": None, "accuracy": None, "accuracy_delta": None, "latency_ms": None,
            "peak_rss_mb": None, "robustness": None}


class _Run:
    """One check in progress: holds the reference's outputs and turns worker results into TargetResults."""

    def __init__(self, model: ModelInfo, feeds: inp.Feeds, opts: CheckOptions, workdir: Path, progress: Progress):
        self.model, self.feeds, self.opts, self.workdir, self.progress = model, feeds, opts, workdir, progress
        self.in_names = [i.name for i in model.inputs]
        self.out_names = [o.name for o in model.outputs]
        #: the static shape of every input with a dynamic dimension, as the feeds have it: what converters get
        self.input_shapes = {s.name: [int(d) for d in feeds.arrays[s.name].shape[1:]] for s in model.inputs
                             if any(not isinstance(d, int) for d in s.shape)}
        self.feeds_file = workdir / "feeds.npz"
        inp.save_feeds(feeds, self.feeds_file, self.in_names)
        self.ref_outputs: dict[str, np.ndarray] = {}
        self.ref_p50: float | None = None
        self.ref_accuracy: float | None = None
        self.score_name: str | None = None
        self.outputs: dict[str, dict[str, np.ndarray]] = {}

    def job(self, target: Target) -> dict:
        return {
            "target": target.to_dict(),
            "source": self.model.artifact().to_dict(),
            "feeds": str(self.feeds_file),
            "feeds_source": self.feeds.source,
            "input_names": self.in_names,
            "output_names": self.out_names,
            "warmup": self.opts.warmup,
            "runs": self.opts.runs,
            "time_budget_s": self.opts.time_budget_s,
            "cache_dir": str(self.opts.cache_dir) if self.opts.cache_dir else None,
            "use_cache": self.opts.use_cache,
            "convert_timeout_s": self.opts.limits.convert_timeout_s,
            "input_shapes": self.input_shapes,
        }

    def thresholds_for(self, target: Target) -> dict:
        return thresholds.merged(target.thresholds, self.opts.thresholds, self.opts.target_thresholds.get(target.id))

    def run(self, target: Target, skip_reason: str | None = None) -> TargetResult:
        self.progress.target_started(target)
        t0 = time.monotonic()
        base = dict(id=target.id, platform=target.platform, gating=target.gating)
        base.update(metrics=_empty_metrics(), thresholds=self.thresholds_for(target))
        if skip_reason:
            res = TargetResult(status="skipped", error=skip_reason, **base)
        else:
            avail = availability(target)
            if not avail.ok:
                res = TargetResult(status="skipped", error=avail.reason, hint=avail.hint, **base)
            else:
                limits = self.opts.limits
                if target.run_timeout_s and not self.opts.timeout_explicit:
                    limits = Limits(limits.convert_timeout_s, target.run_timeout_s, limits.memory_mb)
                wdir = self.workdir / target.id.replace("/", "__")
                raw = run_worker(self.job(target), wdir, limits, lambda ph: self.progress.target_phase(target, ph))
                res = self.evaluate(target, raw, wdir)
        res = _with(res, duration_s=round(time.monotonic() - t0, 3))
        self.progress.target_done(res)
        return res

    def evaluate(self, target: Target, raw: dict, wdir: Path) -> TargetResult:
        status = raw.get("status", "crashed")
        details = dict(raw.get("details") or {})
        if raw.get("conversions"):
            details["conversions"] = raw["conversions"]
        for k in ("backend_requested", "backend_used"):
            if raw.get(k):
                details[k] = raw[k]
        notes: list[str] = []
        metrics = dict(_empty_metrics(), latency_ms=summarize(raw.get("latency")), peak_rss_mb=raw.get("peak_rss_mb"))
        art = raw.get("artifact")
        t = self.thresholds_for(target)
        gating = target.gating
        if raw.get("device") == "software" and gating and not _explicitly_gated(target, self.opts.gate):
            gating = False  # an emulated GPU's numbers say little about a user's GPU
            notes.append("ran on a software GPU adapter (SwiftShader), not a GPU: reported as a cross-check "
                         f"(--gate {target.id} makes it gating)")
        common = dict(id=target.id, platform=target.platform, gating=gating, runtime=raw.get("runtime"),
                      device=raw.get("device"), artifact=art, thresholds=t, op=raw.get("op"), node=raw.get("node"),
                      hint=raw.get("hint"))
        if status != "ok":
            if status in ("crashed", "timeout", "run-error", "load-error", "convert-error"):
                tail = log_tail(Path(raw.get("log", wdir / "worker.log")))
                if tail:
                    details["log_tail"] = tail
            return TargetResult(status=status, error=raw.get("error"), metrics=metrics, details=details,
                                notes=tuple(notes), **common)

        outs = _load_outputs(wdir / "outputs.npz", self.out_names)
        self.outputs[target.id] = outs
        lat = metrics["latency_ms"] or {}
        if details.get("emulated") and lat:
            lat["emulated"] = True  # an emulator's speed, not a device's
        if lat.get("runs_asked"):
            notes.append(f"latency from {lat.get('runs', 0)} of {lat['runs_asked']} runs: one inference takes about "
                         f"{lat['per_run_estimate_ms']:.4g} ms, over the {lat['budget_s']:g} s timing budget"
                         + ("" if lat.get("runs") else " (not timed)"))
        if target.id == REFERENCE:
            self.ref_outputs = outs
            self.ref_p50 = lat.get("p50")
            self.score_name = acc.score_output(outs)
            metrics["accuracy"] = self.ref_accuracy = acc.accuracy(outs, self.feeds.labels, self.score_name)
            return TargetResult(status="pass", metrics=metrics, details=details, **common)

        per, agreement, problems = drift.compare(self.ref_outputs, outs, details.get("output_quant"), self.out_names)
        metrics["outputs"] = per
        metrics["top1_agreement"] = agreement
        a = acc.accuracy(outs, self.feeds.labels, self.score_name)
        metrics["accuracy"] = a
        if a is not None and self.ref_accuracy is not None:
            metrics["accuracy_delta"] = round(a - self.ref_accuracy, 6)
        if self.ref_p50 and lat.get("p50"):
            metrics["p50_vs_reference"] = round(lat["p50"] / self.ref_p50, 3)
        found = problems + thresholds.breaches(per, agreement, metrics["accuracy_delta"], t)
        if raw.get("backend_requested") and raw.get("backend_used") and raw["backend_requested"] != raw["backend_used"]:
            status = "fallback"
            found.insert(0, f"asked for {raw['backend_requested']}, ran on {raw['backend_used']}")
        else:
            status = "drift" if found else "pass"
        if status == "drift" and not gating:
            notes.append(f"{target.id} is a cross-check: its disagreement is reported, it does not fail the run")
        if details.get("caveat") and status == "drift":
            notes.append(details["caveat"])
        return TargetResult(status=status, metrics=metrics, breaches=tuple(found), notes=tuple(notes),
                            details=details, **common)

    def odd_one_out(self, results: list[TargetResult], targets: list[Target]) -> list[str]:
        """Independent runtimes that agree with each other but not with the reference name it.

        Witnesses must be independent: targets that run one converted model (the same first conversion
        after the snapshot, e.g. one onnx2tf SavedModel) count once, and a runtime with a known caveat
        (onnx.reference's wrong kernels) is no witness."""
        lineage = {t.id: (t.converters[1][0] if len(t.converters) > 1 else t.id) for t in targets}
        drifted = [r for r in results if r.status == "drift" and r.id in self.outputs and r.id != REFERENCE
                   and not r.details.get("caveat")]
        agreeing: list[str] = []
        for i, a in enumerate(drifted):
            for b in drifted[i + 1:]:
                per, agreement, problems = drift.compare(self.outputs[a.id], self.outputs[b.id])
                if not problems and not thresholds.breaches(per, agreement, None, thresholds.DEFAULTS):
                    agreeing += [x for x in (a.id, b.id) if x not in agreeing]
        if len({lineage.get(x, x) for x in agreeing}) >= 2:
            return [f"{', '.join(agreeing)} agree with each other but not with the reference {REFERENCE}: "
                    "the reference may be the odd one out"]
        return []


def _explicitly_gated(target: Target, gate: list[str]) -> bool:
    return any(not r.startswith("-") and r.lstrip("+") in (target.id, target.platform, "all") for r in gate)


def _with(res: TargetResult, **kw) -> TargetResult:
    from dataclasses import replace

    return replace(res, **kw)


def check(model_path: str | os.PathLike, opts: CheckOptions, progress: Progress | None = None,
          model: ModelInfo | None = None) -> Report:
    """Run a whole check. Raises UsageError (bad model / input / flags) before any target runs."""
    progress = progress or _Silent()
    model = model or load_model_isolated(model_path)
    feeds = prepare_feeds(model, opts)
    targets = apply_gate(expand(opts.targets, registry()), opts.gate)
    for tt in targets:
        try:
            thresholds.merged(opts.thresholds, opts.target_thresholds.get(tt.id))
        except KeyError as e:
            raise UsageError(f"unknown threshold {e}") from None
    workdir = Path(tempfile.mkdtemp(prefix="portability-run-"))
    try:
        run = _Run(model, feeds, opts, workdir, progress)
        ref = run.run(targets[0])
        results = [ref]
        rest = targets[1:]
        if ref.status != "pass":
            why = f"the reference {REFERENCE} did not run ({ref.status}): nothing to compare with"
            results += [run.run(t, skip_reason=why) for t in rest]
        elif opts.jobs > 1 and len(rest) > 1:
            pool = ThreadPoolExecutor(max_workers=opts.jobs)
            try:
                results += list(pool.map(run.run, rest))
            except BaseException:  # Ctrl-C: stop every worker (they run in sessions of their own)
                kill_all()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown()
        else:
            results += [run.run(t) for t in rest]
        notes = list(feeds.warnings) + run.odd_one_out(results, targets)
        if opts.jobs > 1:
            notes.append(f"targets ran {opts.jobs} at a time: latencies include contention (use --jobs 1 for clean timings)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    passed = all(not r.failed for r in results if r.gating)
    return Report(
        tool={"name": "portability", "version": portability.__version__},
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        environment=environment(),
        model=model.to_dict(),
        inputs={"source": feeds.source, "samples": feeds.samples, "batches": feeds.batches, "seed": feeds.seed,
                "path": str(opts.dataset or opts.inputs) if (opts.dataset or opts.inputs) else None,
                "shapes": {k: list(v.shape[1:]) for k, v in feeds.arrays.items()}},
        reference=REFERENCE,
        targets=tuple(results),
        passed=passed,
        notes=tuple(notes),
    )
