"""The check, stage by stage: read the model and its feeds, plan the targets (``plan``), prepare what their
jobs share (``prepare``), dispatch every target to its worker and evaluate what it returns (``dispatch``,
``evaluate``, ``verdict``), and make the Report."""
from __future__ import annotations

import logging
import os
import platform
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import portability
from portability.core import inputs as inp
from portability.core.model import ModelInfo
from portability.engine import plan, verdict
from portability.engine.dispatch import Dispatch, Progress, Silent
from portability.engine.prepare import prepare
from portability.settings.options import CheckOptions
from portability import matrix
from portability.workers import prestart, shutdown
from portability.report.schema import Report
from portability.sources import load_source_isolated

log = logging.getLogger(__name__)

#: what every check runs on, whatever its targets (the rest of the report's packages: ``env_packages``)
BASE_PACKAGES = ("numpy", "onnx")


def env_packages() -> tuple[str, ...]:
    """The distributions the report's environment names: the base ones, then those the targets' runtimes and
    the converters declare they use (``uses``), each once."""
    from portability.targets import used_dists

    return tuple(dict.fromkeys((*BASE_PACKAGES, *used_dists())))


def environment(sandbox: str = "auto") -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from portability.core.sandbox import describe

    pkgs = {}
    for p in env_packages():
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
            "cores": os.cpu_count(), "packages": pkgs, "sandbox": describe(sandbox)}


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
    # the workers' fork server starts (or is leased from the resident session) while the model is read and its
    # targets are planned; a session's checks take the resident session its services come from, if any
    prestart(resident=(session.services.resident or False) if session is not None else opts.resident == "auto",
             lasting=session is not None)
    try:
        model = model or load_source_isolated(model_path, sandbox=opts.sandbox, shapes=opts.shapes)
        # --generate on an encoder-decoder's decoder: its encoder, read as the model is
        encoder = (load_source_isolated(opts.encoder, sandbox=opts.sandbox)
                   if getattr(opts, "generate", 0) and getattr(opts, "encoder", None) else None)
        feeds = inp.prepare(model, opts)
        chosen = plan.for_options(model.format, opts, getattr(progress, "note", None) or (lambda s: log.info("%s", s)))
    except BaseException:  # a bad model, input or flag: no target runs
        if session is None:
            shutdown()
        raise
    workdir = Path(tempfile.mkdtemp(prefix="portability-run-"))
    dispatch = None
    try:
        dispatch = Dispatch(model, feeds, opts, prepare(model, feeds, opts, workdir, encoder), progress, chosen,
                            session.services if session else None)
        if session is not None:
            session.readable(dispatch.readable)
        done = dispatch.run_check()
        results, rob = done.results, done.robustness
        notes = done.notes + verdict.check_notes(results, chosen.targets, done.outputs, chosen.targets[0].id)
        versions = matrix.compare(results, done.outputs, chosen.versions)
        from portability.report.golden import Golden

        provenance = _provenance(feeds, opts)
        digests = Golden.of(provenance, done.outputs).digests()
        if kept is not None:
            kept.update(inputs=provenance, outputs=dict(done.outputs), feeds=dict(feeds.arrays))
    finally:
        if session is None:
            shutdown()  # the pre-imported worker pool
        if dispatch is not None:
            dispatch.close()
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
        reference=chosen.targets[0].id,
        targets=tuple(results),
        passed=passed,
        notes=tuple(notes),
        versions=versions,
        output_digests=digests,
    )
