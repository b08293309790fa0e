"""The Runtime interface: load an artifact, run it, time it. One concrete class per runtime.

A runtime instance lives inside a worker process (never in the CLI process). Its contract with the
pipeline is **ONNX-shaped**: ``infer`` takes feeds keyed by the source ONNX model's input names in the
ONNX layout and returns outputs keyed by the ONNX model's output names in the ONNX layout. Any mapping a
converted format needs (renamed tensors, NCHW <-> NHWC) happens inside the runtime (usually from
``artifact.meta``) and is described in ``details()``.
"""
from __future__ import annotations

import time as _time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import Availability, modules_present  # noqa: F401  (runtimes import both from here)


def time_calls(fn, args: tuple, warmup: int, runs: int) -> list[float]:
    """Milliseconds of each of ``runs`` calls ``fn(*args)``, after ``warmup`` untimed ones: the one timing
    loop every runtime uses, around the runtime's own call and nothing else."""
    clock = _time.perf_counter
    for _ in range(warmup):
        fn(*args)
    out = []
    for _ in range(runs):
        t0 = clock()
        fn(*args)
        out.append((clock() - t0) * 1e3)
    return out



@dataclass(frozen=True)
class Facts:
    """What a runtime is for one target (``Runtime.facts``): its relative cost (the costliest start first),
    the group whose targets work one at a time, the shared service it needs, the network it may reach."""

    cost: float
    contends: str | None
    service: str | None
    network: str
    #: the service's provider: ``("module:Class", flavour)`` (``workers/services.py`` starts it)
    provider: tuple[str, Any] | None = None
    #: the worker pool its worker forks from (``Runtime.pool``)
    pool: str = ""

class Runtime(ABC):
    #: the artifact format it runs ("onnx", "ort", "tflite", "tfjs")
    input_format: ClassVar[str] = "onnx"
    #: every format it reads, when more than one (OpenVINO: onnx, tflite, saved_model): the planner takes the
    #: shortest route to any of them (a source in one of them runs as given)
    input_formats: ClassVar[tuple[str, ...]] = ()
    #: "cpu" | "gpu" | "software" (a GPU API on a software adapter) — may be refined after load
    device: str = "cpu"
    #: it runs under an emulator: its latencies are the emulator's, not a device's
    emulated: ClassVar[bool] = False
    #: why its speed is no device's, where that is the runtime's own nature (``onnx.reference``: the spec
    #: evaluated in Python): its batches are run and compared as any target's, but it is not timed (``untimed``)
    not_a_device: ClassVar[str | None] = None
    #: what a disagreement with the reference does (not) mean, for a known-imperfect implementation
    caveat: ClassVar[str | None] = None
    #: about how many seconds of work a target of this runtime costs on a small model (start-up, imports,
    #: compilation): the check starts the costly ones first, so that the cores stay busy to the end
    cost_s: ClassVar[float] = 0.3
    #: what its worker may reach over the network in the OS sandbox (``core.sandbox``): "none", or
    #: "browser" (its shared browser's DevTools socket, and a loopback port of its own for the page's files)
    network: ClassVar[str] = "none"
    #: the packages it runs on (``check --versions`` runs it once more per asked version of one)
    uses: ClassVar[tuple[str, ...]] = ()
    #: the worker pool its worker forks from (``workers/worker_zygote.FLAVOURS``): ``tensorflow`` for a runtime
    #: that imports TensorFlow, whose zygote imported it already
    pool: ClassVar[str] = ""
    #: the documented alternatives ``fix`` retries a failing target of it under, in order (``explain.fix``):
    #: each ``{"name", "options"}`` (runtime options, among those it reads: ``OPTIONS``)
    fixes: ClassVar[tuple[dict[str, Any], ...]] = ()
    #: the runtime option that swaps its default kernels for its reference ones (``{"kernels": "reference"}``),
    #: for ``localize``'s A/B at the first diverging node; empty where it has no such switch
    reference_kernels: ClassVar[dict[str, Any]] = {}

    #: the shared services it may use: name -> (provider "module:Class", the flavour its lease asks for);
    #: ``service(options)`` names the one a target uses, and the check starts it through this provider
    providers: ClassVar[dict[str, tuple[str, Any]]] = {}

    #: the target options it reads; any other is a mistake in a target's definition
    OPTIONS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, options: dict[str, Any] | None = None):
        self.options = dict(options or {})
        #: endpoints of services the check runs for its workers (``browser``: a shared Chromium)
        self.services: dict[str, str] = {}
        #: ``--strict-backend``: a runtime that can refuse to run nodes off the asked backend does
        self.strict_backend = False
        #: the check its target belongs to (``Job.check_id``; "" outside one)
        self.check_id = ""
        #: what one inference took in the correctness batches (ms; set by the worker before ``warm_up``)
        self.pace_ms = 0.0
        self.check_options(self.options)

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """A ValueError for an option this runtime does not read: a mistake in a target's definition."""
        unknown = sorted(set(options) - cls.OPTIONS)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown option(s) {', '.join(unknown)} "
                             f"(it reads: {', '.join(sorted(cls.OPTIONS)) or 'none'})")

    # -- facts ---------------------------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def availability(cls) -> Availability:
        """Whether it can run here. Must not import heavy packages (find_spec, file checks only)."""

    @abstractmethod
    def describe(self) -> str:
        """Name and version of what ran, e.g. ``"onnxruntime 1.31.1 (CPUExecutionProvider)"``.

        Called after ``load``."""

    def backend_used(self) -> str | None:
        """The backend / execution provider that actually ran, when the runtime can tell (after load)."""
        return None

    def backend_requested(self) -> str | None:
        """The backend this target asked for; differs from ``backend_used`` → status ``fallback``."""
        return None

    def untimed(self) -> str | None:
        """Why its speed is no device's a user ships to (a key of ``metrics.latency.UNTIMED``), else None: it is
        then run and compared, not timed, unless ``--time-emulated``."""
        if self.emulated:
            return "emulated"
        if self.device == "software":
            return "software adapter"
        return self.not_a_device

    def details(self) -> dict[str, Any]:
        """Extra plain-JSON facts for the report (bundle used, layout mapping, threads, coverage...)."""
        return {}

    @classmethod
    def accepts(cls, options: dict[str, Any]) -> dict[str, Any]:
        """What a device's own account of a run (a bundle page's ``info``) holds when the backend these options
        ask for ran, ``{field: value}``: an account that says otherwise ran elsewhere, a ``fallback``
        (``engine.verdict.reported_breach``; the bundle's page applies the same rule)."""
        return {}

    # -- what the runtime is, for a target's options: class-level, read without creating a runtime (the
    # -- check's own process never creates one; only the worker does)

    @classmethod
    def facts(cls, options: dict[str, Any] | None = None) -> "Facts":
        """Everything the check asks of a runtime before its worker starts, for these target options."""
        o = dict(options or {})
        cls.check_options(o)
        service = cls.service(o)
        return Facts(cost=cls.cost(o), contends=cls.contends(o), service=service, network=cls.network,
                     provider=cls.providers.get(service) if service else None, pool=cls.pool)

    @classmethod
    def cost(cls, options: dict[str, Any]) -> float:
        """``cost_s``, for this target's options (a software GPU adapter costs more than wasm)."""
        return cls.cost_s

    @classmethod
    def contends(cls, options: dict[str, Any]) -> str | None:
        """A name shared by the targets whose work one process of a shared service serializes (a browser's
        GPU process runs every page's shaders on its one main thread): such targets work one at a time."""
        return None

    @classmethod
    def service(cls, options: dict[str, Any]) -> str | None:
        """The shared service this runtime uses, if any (``workers/services.py``: a browser flavour, the
        emulated ARM64 interpreter): the check starts it once and gives its endpoint in ``services``."""
        return None

    def output_quant(self) -> dict[str, dict] | None:
        """Per quantized output, its ``{"scale", "zero_point"}`` (drift is then also given in steps)."""
        return None

    def load_timings(self) -> dict[str, float]:
        """Parts of the load worth reporting apart (ms), e.g. a browser's runtime init and session."""
        return {}

    # -- work ----------------------------------------------------------------------------------------
    @abstractmethod
    def load(self, artifact: Artifact) -> None:
        """Open the artifact. Raise LoadError (naming the op when known) or Unavailable."""

    @abstractmethod
    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One inference. Raise RunError on failure."""

    def infer_all(self, batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Many inferences, one per batch, in order. Override when one call per batch is costly (a
        browser page, an emulator)."""
        return [self.infer(b) for b in batches]

    #: where ``decode``'s loop runs, for the report: "worker" (one ``infer`` a step), "page" (in a browser page)
    decodes_in: ClassVar[str] = "worker"

    def decode(self, layout, inputs, prompt: list[int], steps: int, teacher: list[int] | None = None,
               context: dict[str, np.ndarray] | None = None):
        """Greedy decoding with the key/value cache (``check --generate``; ``core.generate.Decoded``): by default
        one ``infer`` a step, the cache round-tripping through this process. Override to keep the loop and the
        cache on the platform (a browser page's tensors). ``context``: an encoder-decoder's encoder outputs,
        fed to every step."""
        from portability.core.generate import decode

        return decode(self.infer, layout, inputs, prompt, steps, teacher, context)

    def decodes_where(self, context) -> str:
        """Where ``decode`` runs its loop for these arguments (``decodes_in``; an override may not take them all)."""
        return self.decodes_in

    def warm_up(self, feeds: dict[str, np.ndarray], warmup: int) -> None:
        """Warm up before the target's turn to time, while other targets work (``time`` may then warm up
        less). Override where warming takes long (a browser page's JIT); the default does nothing."""

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        """Milliseconds per inference over ``runs`` runs after ``warmup`` runs.

        Override to time closer to the runtime (prepared feeds, inside a page); the default times
        ``infer``."""
        return time_calls(self.infer, (feeds,), warmup, runs)

    def close(self) -> None:
        pass


def placement(backend: str, ran: list[tuple[str, bool]]) -> dict[str, Any]:
    """``details["placement"]``: of the model's nodes (``(op, ran on the backend)`` each), how many ran on
    ``backend``, the backend the target asked for, and the ops of the others (most frequent first)."""
    on = sum(1 for _, b in ran if b)
    elsewhere: dict[str, int] = {}
    for op, b in ran:
        if not b:
            elsewhere[op] = elsewhere.get(op, 0) + 1
    return {"backend": backend, "nodes": len(ran), "on_backend": on, "share": round(on / len(ran), 3) if ran else 1.0,
            "elsewhere": dict(sorted(elsewhere.items(), key=lambda kv: (-kv[1], kv[0])))}


def off_backend(details: dict) -> str | None:
    """How many of a target's nodes ran off the backend it asked for (``details["placement"]``, as ``placement``
    makes it, or ``{"backend", "fully"}`` from a runtime that tells only that), with the share on it and the ops
    of the others; None when they all ran on it or nothing tells. The verdict makes it the breach of a
    ``fallback`` under ``--strict-backend``; the report shows it as a note otherwise."""
    p = details.get("placement") or {}
    if p.get("fully") is False:  # a runtime that tells only whether every node ran there (LiteRT.js)
        return f"part of the model ran outside {p.get('backend')} (the runtime says it is not fully accelerated)"
    if not p or "nodes" not in p or p.get("on_backend", 0) >= p.get("nodes", 0):
        return None
    ops = ", ".join(f"{op}×{n}" for op, n in (p.get("elsewhere") or {}).items())
    return f"{p['nodes'] - p['on_backend']} of {p['nodes']} nodes ({ops}) ran outside {p['backend']} (share {p['share']:g} on it)"


def output_dtypes(artifact: Artifact) -> dict[str, str]:
    """The source ONNX model's output dtypes, as the converters recorded them (``meta["onnx_signature"]``):
    a runtime gives its outputs back in these."""
    return {t["name"]: t["dtype"] for t in (artifact.meta.get("onnx_signature") or {}).get("outputs", [])}
