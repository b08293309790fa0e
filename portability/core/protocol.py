"""The worker protocol: what crosses the process boundary between a check and a target's worker.

A :class:`Job` goes in (as JSON), phase events come back while it runs, and one :class:`WorkerResult`
comes out (as JSON), plus the outputs of every batch in an ``.npz`` written by :func:`save_outputs`
and read by :func:`load_outputs`. Every type here is a frozen dataclass with ``to_dict`` /
``from_dict``; nothing crosses as a loose dict. A worker pool or a browser pool serves exactly this:
one ``run(Job) -> WorkerResult`` per request.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from portability.core.artifact import Artifact
from portability.core.status import OK, WORKER, Status, worker_status
from portability.core.target import Target

PROTOCOL_VERSION = 1


class Phase(str, Enum):
    """A worker's phases, in order. ``DONE`` means its result file is written."""

    START = "start"
    CONVERT = "convert"
    #: waiting for a conversion another target is running (one onnx2tf run for many targets): it works
    #: on nothing meanwhile, so it holds no job slot
    BLOCKED = "blocked"
    LOAD = "load"
    INFER = "infer"
    #: ready to time; waits for the parent's go (a line on its stdin) so that it times alone
    WAIT = "wait"
    TIME = "time"
    #: timed: closing the runtime and writing the result (no longer holds the timing slot)
    CLOSE = "close"
    DONE = "done"

    @property
    def running(self) -> bool:
        """Past conversion: the run time limit applies from the first of these (waiting excepted)."""
        return self in (Phase.LOAD, Phase.INFER, Phase.WAIT, Phase.TIME, Phase.CLOSE)

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {Phase.START: "starting", Phase.CONVERT: "converting", Phase.BLOCKED: "waiting for a conversion", Phase.LOAD: "loading", Phase.INFER: "running",
           Phase.WAIT: "waiting to time", Phase.TIME: "timing", Phase.CLOSE: "closing", Phase.DONE: "done"}


#: a terminal colour or cursor sequence
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

@dataclass(frozen=True)
class Job:
    """One target's work: convert the source along the target's chain, load, run every batch, time."""

    target: Target
    source: Artifact
    #: the source model's signature (``{"inputs": [{name, dtype, shape}], "outputs": [...]}``): converters
    #: read it here instead of loading the model again outside the isolated loader
    signature: dict
    feeds: str
    feeds_source: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    #: a feeds file the converters calibrate on instead of ``feeds`` (empty: ``feeds``)
    calibration: str = ""
    #: where the calibration samples came from, as converters are told (``ConvertContext.calibration_source``):
    #: "dataset", "file" or "synthesized" (empty: ``feeds_source``)
    calibration_source: str = ""
    warmup: int = 10
    runs: int = 50
    time_budget_s: float | None = None
    #: seconds the correctness batches may take (None or 0: every batch; a target's own budget first)
    sample_budget_s: float | None = None
    cache_dir: str | None = None
    use_cache: bool = True
    convert_timeout_s: float | None = None
    #: static shapes of the inputs with dynamic dimensions (what converters that need them receive)
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    #: endpoints of services the check runs for its workers (``browser``, ``browser-webgpu``)
    services: dict[str, str] = field(default_factory=dict)
    #: where the worker writes its result and outputs (set by the runner)
    result: str = ""
    outputs: str = ""
    #: more batches (the robustness pass: ``metrics.robustness.perturb``) run after the clean ones in the same call;
    #: neither converters nor timing see them, and their outputs go to ``extra_outputs``
    extra_feeds: str = ""
    extra_outputs: str = ""
    #: the clean batches the extra ones perturb (the first ``extra_clean``): a target too slow to compare that
    #: many within its budget runs none of the extra ones (there is nothing to compare them with)
    extra_clean: int = 0
    #: the seconds the worker may run from loading on (the parent kills it then): the extra batches are not
    #: started when at the pace of the clean ones they would take over half of it
    run_timeout_s: float | None = None
    #: the OS sandbox the worker enters before it reads the model (``core.sandbox.Sandbox.to_dict``)
    sandbox: dict = field(default_factory=dict)
    #: the check this job belongs to: a conversion that failed for one of its targets fails the others
    #: that need it at once (``engine.cache``), without converting again
    check_id: str = ""
    #: ``--strict-backend``: a runtime that can refuse to run nodes off the backend asked for does
    strict_backend: bool = False
    #: the worker pool its worker forks from (``Runtime.pool``: "", ``tensorflow``, ``torch`` or ``tfjs``)
    pool: str = ""
    #: the pools whose workers fork from a zygote of their own in this check (``worker_pool.serves``; else from the
    #: plain one), each with whether it sets an environment of its own (``worker_zygote.FLAVOUR_ENV``): a conversion
    #: of such a pool, or in a worker of such a pool, is made in a worker of its own pool
    pools: dict[str, bool] = field(default_factory=dict)
    #: ``--generate``: ``{"steps": N, "prompt": [ids], "teacher": [the reference's tokens] or None}``; the worker
    #: decodes after the single pass and writes ``generation.npz`` beside its outputs (empty: no generation)
    generate: dict = field(default_factory=dict)
    #: ``--time-emulated``: time a target whose speed is no device's (a software adapter's, an emulator's) too
    time_emulated: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(target=self.target.to_dict(), source=self.source.to_dict(), input_names=list(self.input_names),
                 output_names=list(self.output_names), protocol=PROTOCOL_VERSION)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Job":
        if d.get("protocol") != PROTOCOL_VERSION:
            raise ValueError(f"job protocol {d.get('protocol')!r}, this worker speaks {PROTOCOL_VERSION}")
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw.update(target=Target.from_dict(d["target"]), source=Artifact.from_dict(d["source"]),
                  input_names=tuple(d["input_names"]), output_names=tuple(d["output_names"]),
                  input_shapes={k: list(v) for k, v in (d.get("input_shapes") or {}).items()})
        return cls(**kw)

    def at(self, workdir: Path) -> "Job":
        """This job with its result and outputs files in ``workdir``."""
        return replace(self, result=str(workdir / "result.json"), outputs=str(workdir / "outputs.npz"),
                       extra_outputs=str(workdir / "extra_outputs.npz") if self.extra_feeds else "")


@dataclass(frozen=True)
class ConversionStep:
    converter: str  # "<Name> <version>"
    cached: bool
    seconds: float
    #: the static input shapes the converter was given (only converters that use them)
    input_shapes: dict[str, list[int]] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"converter": self.converter, "cached": self.cached, "seconds": self.seconds}
        if self.input_shapes:
            d["input_shapes"] = self.input_shapes
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ConversionStep":
        return cls(d["converter"], bool(d["cached"]), float(d["seconds"]), d.get("input_shapes"))


#: the worker's own outcome before any comparison: ``ok`` or the failure status it ended in
WORKER_STATUSES = WORKER


@dataclass(frozen=True)
class WorkerResult:
    """What a worker (or the runner, for a worker that died) reports about one job."""

    #: :data:`~portability.core.status.OK` or the :class:`Status` it failed with (text in, member out)
    status: Status | str
    error: str | None = None
    op: str | None = None
    node: str | None = None
    hint: str | None = None
    conversions: tuple[ConversionStep, ...] = ()
    artifact: dict | None = None  # format, sha256, size_bytes, gzip_bytes, files
    runtime: str | None = None
    device: str | None = None
    backend_requested: str | None = None
    backend_used: str | None = None
    #: raw timings: load, first (ms), samples (ms per timed run), the timing plan's record, load_timings
    latency: dict | None = None
    details: dict = field(default_factory=dict)
    #: latencies measured under an emulator (not a device's speed)
    emulated: bool = False
    #: per output: the quantization (scale, zero point) of a quantized model's output
    output_quant: dict | None = None
    #: what the runtime's disagreement does and does not mean (a known-imperfect implementation)
    caveat: str | None = None
    peak_rss_mb: float | None = None
    wall_s: float | None = None
    #: seconds the worker spent in each phase (measured by the parent; ``wait``: waiting to time alone)
    phases_s: dict | None = None
    log: str | None = None
    #: the worker stopped before a conversion that a worker of this pool makes (``workers.worker.Elsewhere``): the
    #: runner runs the job again there, its earlier steps cached; never a target's result
    again_in: str = ""

    def __post_init__(self):
        object.__setattr__(self, "status", worker_status(self.status))
        if self.error and "\x1b" in self.error:  # a tool's terminal colours (torch.onnx's) are no part of its words
            object.__setattr__(self, "error", _ANSI.sub("", self.error))

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["status"] = str(self.status)
        d["conversions"] = [c.to_dict() for c in self.conversions]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WorkerResult":
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["conversions"] = tuple(ConversionStep.from_dict(c) for c in d.get("conversions") or ())
        kw["details"] = dict(d.get("details") or {})
        return cls(**kw)

    @classmethod
    def failed(cls, status: Status, error: str, **kw) -> "WorkerResult":
        return cls(status=status, error=error, **kw)


# -- the ONNX <-> TFLite tensor mapping a converter records in its artifact (``meta["tflite_io"]``) -------

@dataclass(frozen=True)
class TensorLink:
    """One ONNX tensor and the TFLite (or SavedModel) tensor that holds it.

    ``perm``: for an input, the transposition from the ONNX layout to the file's (``to_tflite``); for an
    output, from the file's layout back to ONNX's (``to_onnx``); None when only a reshape relates them.
    ``quant``: ``{"scale", "zero_point"}`` of a quantized tensor. ``key``: its signature key, if any."""

    onnx: str
    index: int
    tensor: str
    shape: tuple[int, ...]
    dtype: str
    perm: tuple[int, ...] | None = None
    quant: dict | None = None
    key: str | None = None

    def to_dict(self, perm_name: str) -> dict[str, Any]:
        return {"onnx": self.onnx, "index": self.index, "tensor": self.tensor, "shape": list(self.shape),
                "dtype": self.dtype, perm_name: list(self.perm) if self.perm is not None else None,
                "quant": self.quant, "key": self.key}

    @classmethod
    def from_dict(cls, d: dict[str, Any], perm_name: str) -> "TensorLink":
        perm = d.get(perm_name)
        return cls(d["onnx"], int(d["index"]), d["tensor"], tuple(int(x) for x in d["shape"]), d["dtype"],
                   tuple(int(x) for x in perm) if perm is not None else None, d.get("quant"), d.get("key"))


@dataclass(frozen=True)
class IoMap:
    inputs: tuple[TensorLink, ...]
    outputs: tuple[TensorLink, ...]
    #: "shapes" (decided by matching shapes) | "probe" (by a probe inference against ONNX Runtime)
    resolved_by: str = "shapes"
    #: whether the file has a signature (else tensors are matched by order)
    signature: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": [t.to_dict("to_tflite") for t in self.inputs],
                "outputs": [t.to_dict("to_onnx") for t in self.outputs],
                "resolved_by": self.resolved_by, "signature": self.signature}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "IoMap":
        return cls(tuple(TensorLink.from_dict(t, "to_tflite") for t in d["inputs"]),
                   tuple(TensorLink.from_dict(t, "to_onnx") for t in d["outputs"]),
                   d.get("resolved_by", "shapes"), bool(d.get("signature")))


# -- arrays across the boundary ---------------------------------------------------------------------------
# Tensor names may hold characters zip members should not: arrays are keyed by position. Feeds: ``in<i>``
# stacked over batches. Outputs: ``out<j>`` stacked over batches, or ``out<j>.<batch>`` per batch when the
# shape varies with the input (NonZero, NMS...).

def save_feeds(arrays: dict[str, np.ndarray], path: Path, names: list[str] | tuple[str, ...]) -> None:
    np.savez(path, **{f"in{i}": arrays[n] for i, n in enumerate(names)})


def load_feeds(path: Path, names: list[str] | tuple[str, ...]) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {n: z[f"in{i}"] for i, n in enumerate(names)}


def save_outputs(per_batch: list[dict[str, np.ndarray]], path: Path, names: list[str] | tuple[str, ...]) -> None:
    """Every batch's outputs: stacked where the shape is the same for all batches, else one array each.
    An output a batch did not give is left out (the comparison reports it missing)."""
    nb = len(per_batch)
    saved: dict[str, np.ndarray] = {}
    for j, n in enumerate(names):
        outs = [np.asarray(r[n]) for r in per_batch if n in r]
        if len(outs) != nb:
            continue
        if len({o.shape for o in outs}) == 1:
            saved[f"out{j}"] = np.stack(outs)
        else:
            saved.update({f"out{j}.{i}": o for i, o in enumerate(outs)})
    np.savez(path, **saved)


def load_outputs(path: Path, names: list[str] | tuple[str, ...]) -> dict[str, np.ndarray | list[np.ndarray]]:
    """Outputs stacked over batches, or a list of per-batch arrays where the shape varies."""
    if not Path(path).is_file():
        return {}
    out: dict[str, np.ndarray | list[np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as z:
        for j, n in enumerate(names):
            if f"out{j}" in z.files:
                out[n] = z[f"out{j}"]
            else:
                parts = sorted((int(k.rsplit(".", 1)[1]), k) for k in z.files if k.startswith(f"out{j}."))
                if parts:
                    out[n] = [z[k] for _, k in parts]
    return out


__all__ = ["Phase", "Job", "ConversionStep", "WorkerResult", "WORKER_STATUSES", "TensorLink", "IoMap", "save_feeds", "load_feeds",
           "save_outputs", "load_outputs", "PROTOCOL_VERSION"]
