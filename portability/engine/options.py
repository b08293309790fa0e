"""A check's options, their defaults (written once, here), and the one function that resolves settings
(a settings file, then command-line flags or keyword arguments) into them.

Setting names are the user's: those of ``[tool.portability]``, of the ``check`` flags (``--time-budget``
is ``time_budget``) and of ``portability.check(**options)``. Light module: no numpy, no heavy import.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from portability.core.errors import UsageError


@dataclass(frozen=True)
class Limits:
    convert_timeout_s: float = 900.0
    run_timeout_s: float = 300.0
    memory_mb: float | None = None


#: the share of this machine's memory a target may use when no limit is given
MEMORY_SHARE = 0.8


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
    #: targets worked on at once (their timing is always alone: ``engine.schedule``)
    jobs: int = field(default_factory=lambda: default_jobs())
    #: a format (``onnx``) or converter (``OnnxFromTorchScript``) every planned chain must pass through
    via: str | None = None
    #: the robustness pass: perturbed (and, for a differentiable source, adversarial) inputs on every target
    robustness: bool = False
    #: the first rows of the inputs it perturbs
    robustness_samples: int = 64
    #: the OS sandbox of every process that reads or runs the model: auto, require, off (``core.sandbox``)
    sandbox: str = "auto"
    #: {package: [versions]}: the targets using a package run once more per version (``engine.versions``)
    versions: dict = field(default_factory=dict)


def default_jobs() -> int:
    import os

    return max(1, os.cpu_count() or 1)


_D = CheckOptions()
_L = Limits()
#: every setting a check takes, with its default (None: computed, or not set)
DEFAULTS: dict[str, Any] = {
    "targets": _D.targets, "inputs": None, "dataset": None, "shapes": [], "samples": None, "seed": _D.seed,
    "input_range": _D.value_range, "warmup": _D.warmup, "runs": _D.runs, "time_budget": _D.time_budget_s,
    "timeout": _L.run_timeout_s, "convert_timeout": _L.convert_timeout_s, "memory_limit_mb": None,
    "thresholds": {}, "gate": [], "use_cache": _D.use_cache, "cache_dir": None, "jobs": _D.jobs,
    "via": None, "robustness": _D.robustness, "robustness_samples": _D.robustness_samples,
    "sandbox": _D.sandbox, "versions": None,
}
#: flag names that set a threshold, and the threshold they set
THRESHOLD_FLAGS = {"max_abs": "max_abs", "cosine": "cosine", "min_top1": "top1_agreement", "max_accuracy_drop": "accuracy_drop"}


def _range(v: Any) -> tuple[float, float]:
    if isinstance(v, str):
        try:
            lo, hi = (float(x) for x in v.split(","))
        except ValueError:
            raise UsageError(f"--input-range must look like LOW,HIGH (e.g. 0,1), got '{v}'") from None
    else:
        lo, hi = (float(x) for x in v)
    if not lo < hi:
        raise UsageError(f"--input-range: LOW must be below HIGH, got '{v}'")
    return lo, hi


def _thresholds(layers: list[dict]) -> tuple[dict, dict]:
    """(global, per target): later layers win; a global bound set later overrides the same bound in
    earlier per-target tables. Every name is checked against the metrics' thresholds."""
    from portability.metrics.thresholds import DEFAULTS as KNOWN

    glob: dict = {}
    per: dict = {}
    for layer in layers:
        table = dict(layer.get("thresholds") or {})
        table.update({THRESHOLD_FLAGS[k]: layer[k] for k in THRESHOLD_FLAGS if layer.get(k) is not None})
        for k, v in table.items():
            if isinstance(v, dict):
                per.setdefault(k, {}).update(v)
                continue
            glob[k] = v
            for d in per.values():
                d.pop(k, None)
    for name in list(glob) + [k for d in per.values() for k in d]:
        if name not in KNOWN:
            raise UsageError(f"unknown threshold '{name}' (known: {', '.join(KNOWN)}; or a table per target id)")
    return glob, per


def _gate(value: Any) -> list[str]:
    items = [value] if isinstance(value, str) else list(value or [])
    return [g.strip() for item in items for g in str(item).split(",") if g.strip()]


def _memory(mb: float | None) -> float:
    if mb is None:
        import psutil

        return psutil.virtual_memory().total / 2**20 * MEMORY_SHARE
    if mb <= 0:
        raise UsageError("--memory-limit-mb must be positive")
    return float(mb)


def resolve(*layers: dict[str, Any]) -> CheckOptions:
    """CheckOptions from settings layers, lowest first (a settings file, then flags or keyword arguments):
    in each layer a value of None is "not given". Unknown names are a UsageError naming the known ones."""
    known = set(DEFAULTS) | set(THRESHOLD_FLAGS)
    for layer in layers:
        bad = sorted(k for k, v in layer.items() if k not in known and v is not None)
        if bad:
            raise UsageError(f"unknown option '{bad[0]}' (known: {', '.join(sorted(known))})")
    from portability.core.sandbox import default_mode

    s = dict(DEFAULTS, sandbox=default_mode())
    for layer in layers:
        s.update({k: v for k, v in layer.items() if k in DEFAULTS and v is not None and k != "thresholds"})
    glob, per = _thresholds(list(layers))
    path = lambda v: Path(v) if v is not None else None  # noqa: E731
    limits = Limits(convert_timeout_s=float(s["convert_timeout"]), run_timeout_s=float(s["timeout"]),
                    memory_mb=_memory(s["memory_limit_mb"]))
    return CheckOptions(
        targets=s["targets"] if isinstance(s["targets"], str) else ",".join(s["targets"]),
        inputs=path(s["inputs"]), dataset=path(s["dataset"]), shapes=_shapes(s["shapes"]), samples=s["samples"],
        seed=int(s["seed"]), value_range=_range(s["input_range"]), warmup=int(s["warmup"]), runs=int(s["runs"]),
        time_budget_s=float(s["time_budget"]), limits=limits, thresholds=glob, target_thresholds=per,
        gate=_gate(s["gate"]), timeout_explicit=any(layer.get("timeout") is not None for layer in layers),
        use_cache=bool(s["use_cache"]), cache_dir=path(s["cache_dir"]), jobs=int(s["jobs"]),
        via=str(s["via"]) if s["via"] else None, robustness=bool(s["robustness"]),
        robustness_samples=_positive(s["robustness_samples"], "--robustness-samples"), sandbox=_sandbox(s["sandbox"]), versions=_versions(s["versions"]))


def _versions(v: Any) -> dict:
    """``["onnxruntime=1.20.1,1.31.1"]`` (flags) or ``{"onnxruntime": ["1.20.1"]}`` (a settings file)."""
    from portability.engine.versions import parse

    if isinstance(v, dict):
        v = [f"{k}={','.join(x) if isinstance(x, (list, tuple)) else x}" for k, x in v.items()]
    return parse([v] if isinstance(v, str) else list(v or []))


def _sandbox(v: Any) -> str:
    from portability.core.sandbox import MODES

    if str(v) not in MODES:
        raise UsageError(f"--sandbox must be one of {', '.join(MODES)}, got '{v}'")
    return str(v)


def _positive(v: Any, flag: str) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise UsageError(f"{flag} must be a whole number, got {v!r}") from None
    if n < 1:
        raise UsageError(f"{flag} must be at least 1, got {n}")
    return n


def _shapes(v: Any) -> list[str]:
    """``["x=1x3x224x224"]`` or ``{"x": [1, 3, 224, 224]}`` -> the ``--shape`` strings."""
    if isinstance(v, dict):
        return [f"{k}={'x'.join(str(int(d)) for d in dims)}" for k, dims in v.items()]
    return list(v or [])


__all__ = ["CheckOptions", "Limits", "DEFAULTS", "THRESHOLD_FLAGS", "resolve", "MEMORY_SHARE"]
