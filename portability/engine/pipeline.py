"""The check: model -> feeds -> reference -> every target in its worker -> metrics -> Report."""
from __future__ import annotations

import logging
import os
import platform
import shutil
import tempfile
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import portability
from portability.core import inputs as inp
from portability.core.errors import UsageError
from portability.core.model import ModelInfo
from portability.core.status import Status
from portability.engine import plan, verdict
from portability.engine.evaluate import Evaluator
from portability.engine.lease import Progress, Runner, Silent
from portability.settings.options import CheckOptions
from portability.workers import shutdown, versions
from portability.report.schema import Report
from portability.sources import load_source_isolated
from portability.targets import Target

log = logging.getLogger(__name__)

ENV_PACKAGES = ("numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "tensorflow-cpu", "ai-edge-litert", "onnx2tf",
                "tensorflowjs", "playwright", "torch")


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
    progress = progress or Silent()
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
        judge = Evaluator(model, feeds, opts, rob)
        run = Runner(model, feeds, opts, workdir, progress, judge, session.services if session else None)
        if session is not None:
            session.readable(run.readable)
        judge.reference, judge.plans, run.no_route = targets[0].id, plans, no_route
        run.prestart(targets[1:])
        ref = run.run(targets[0])
        results, rest = [ref], targets[1:]
        synthesized_failed = inp.failure_help(ref.status, feeds, opts.value_range, model) if ref.status != Status.PASS else []
        if synthesized_failed:
            ref = results[0] = replace(ref, hint=ref.hint or synthesized_failed[1])
        if ref.status != Status.PASS:
            why = f"the reference {judge.reference} did not run ({ref.status}): nothing to compare with"
            results += [run.run(t, skip_reason=why) for t in rest]
        else:
            results += run.run_all(rest)
        notes = (list(feeds.warnings) + judge.quantized_note() + synthesized_failed[:1]
                 + judge.odd_one_out(results, targets) + verdict.delegate_ab(results, targets))
        matrix = versions.matrix(results, judge.outputs, version_info)
        if kept is not None:
            kept.update(inputs=_provenance(feeds, opts), outputs=dict(judge.outputs))
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
