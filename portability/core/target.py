"""Target: data, not code. An id, a chain of converters, a runtime, options and thresholds."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Target:
    """One thing to check.

    ``runtime`` and each converter are ``"module:Class"`` strings, imported only in the worker.
    ``converters`` is the chain from the source model to the artifact the runtime opens, each step
    ``(class path, options)``: planned for each check from the source's format, the runtime's format and
    ``variant`` (``{"quant": "int8"}``: which of its format's variants the target runs) by
    ``portability.engine.plan`` — registry entries leave it empty. ``thresholds`` override the defaults for this target (e.g. fp16 and int8
    variants are held to looser numeric bounds). ``run_timeout_s`` overrides the default run time limit
    (the slow ``onnx.reference`` evaluator has its own); ``time_budget_s`` and ``min_runs`` bound its
    latency sampling (a reference evaluator's speed is nobody's deployment latency).
    """

    id: str
    runtime: str
    converters: tuple[tuple[str, dict[str, Any]], ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    variant: dict[str, str] = field(default_factory=dict)
    gating: bool = True
    thresholds: dict[str, float | None] = field(default_factory=dict)
    run_timeout_s: float | None = None
    #: seconds its latency sampling may take (None: the check's budget) and the fewest timed runs
    time_budget_s: float | None = None
    min_runs: int | None = None
    #: seconds its correctness batches may take (None: unlimited, or the slow targets' budget for an
    #: emulated or software-adapter runtime): a slow inference then compares fewer batches
    sample_budget_s: float | None = None
    description: str = ""
    #: another Python environment's interpreter its worker runs in, and variables its worker gets (a version
    #: of a package other than the installed one: ``portability.matrix``)
    python: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def platform(self) -> str:
        return self.id.split("/", 1)[0]

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "runtime": self.runtime,
            "converters": [[c, o] for c, o in self.converters],
            "options": self.options,
            "variant": self.variant,
            "gating": self.gating,
            "thresholds": self.thresholds,
            "run_timeout_s": self.run_timeout_s,
            "time_budget_s": self.time_budget_s,
            "min_runs": self.min_runs,
            "sample_budget_s": self.sample_budget_s,
            "description": self.description,
            "python": self.python,
            "env": self.env,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Target":
        return cls(
            id=d["id"],
            runtime=d["runtime"],
            converters=tuple((c, dict(o)) for c, o in d.get("converters", [])),
            options=dict(d.get("options") or {}),
            variant=dict(d.get("variant") or {}),
            gating=bool(d.get("gating", True)),
            thresholds=dict(d.get("thresholds") or {}),
            run_timeout_s=d.get("run_timeout_s"),
            time_budget_s=d.get("time_budget_s"),
            min_runs=d.get("min_runs"),
            sample_budget_s=d.get("sample_budget_s"),
            description=d.get("description", ""),
            python=d.get("python"),
            env=dict(d.get("env") or {}),
        )


def load_class(path: str):
    """``"package.module:Class"`` -> the class (imports the module). A miss says what the module has."""
    module, _, name = path.partition(":")
    mod = importlib.import_module(module)
    try:
        return getattr(mod, name)
    except AttributeError:
        have = sorted(k for k, v in vars(mod).items() if isinstance(v, type) and v.__module__ == mod.__name__)
        raise AttributeError(f"{module} has no {name!r} (it defines: {', '.join(have) or 'no classes'})") from None
