"""The report: frozen dataclasses of plain values with an explicit, versioned to_dict/from_dict.

Schema version 1 (DESIGN.md). Fields may be added; none is renamed or removed without a new version.
Arrays never enter the report.
"""
from __future__ import annotations

import re

from dataclasses import dataclass, field, fields
from typing import Any

from portability.core.status import FAILING, STATUSES, Status  # noqa: F401  (the report's vocabulary, re-exported)

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TargetResult:
    id: str
    platform: str
    status: Status
    gating: bool
    runtime: str | None = None
    device: str | None = None
    error: str | None = None
    #: install hint for a ``skipped`` target; op / node named by a failing runtime or converter
    hint: str | None = None
    op: str | None = None
    node: str | None = None
    artifact: dict | None = None
    metrics: dict = field(default_factory=dict)
    thresholds: dict = field(default_factory=dict)
    #: why the status is ``drift`` / ``fallback``, one line each
    breaches: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    details: dict = field(default_factory=dict)
    duration_s: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "status", Status(self.status))

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    @property
    def route(self) -> str | None:
        """The converters that made this target's model, in order (``A → B``), a snapshot of a format into
        itself left out; None where none ran (the source's own format)."""
        steps = [str(c.get("converter", "")).split(" ")[0] for c in (self.details or {}).get("conversions") or []]
        steps = [s for s in steps if s and not re.fullmatch(r"(\w+)From\1", s)]
        return " → ".join(steps) or None

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["status"] = str(self.status)
        d["breaches"] = list(self.breaches)
        d["notes"] = list(self.notes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TargetResult":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["breaches"] = tuple(d.get("breaches") or ())
        kw["notes"] = tuple(d.get("notes") or ())
        return cls(**kw)


@dataclass(frozen=True)
class Report:
    tool: dict
    created_at: str
    environment: dict
    model: dict
    inputs: dict
    reference: str
    targets: tuple[TargetResult, ...]
    passed: bool
    notes: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION
    #: the runtime-version matrix (``check --versions``): {"packages": {pkg: [versions]}, "rows": [...]}
    versions: dict = field(default_factory=dict)
    #: what each target's outputs were (``report/golden.py``, ``Golden.digests``): the inputs' provenance
    #: and per target and output its statistics, digest and sampled elements; a baseline for outputs
    output_digests: dict = field(default_factory=dict)

    def target(self, tid: str) -> TargetResult | None:
        return next((t for t in self.targets if t.id == tid), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "created_at": self.created_at,
            "environment": self.environment,
            "model": self.model,
            "inputs": self.inputs,
            "reference": self.reference,
            "targets": [t.to_dict() for t in self.targets],
            "passed": self.passed,
            "notes": list(self.notes),
            **({"versions": self.versions} if self.versions else {}),
            **({"output_digests": self.output_digests} if self.output_digests else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"report schema_version {d.get('schema_version')!r} is not {SCHEMA_VERSION}")
        return cls(
            tool=d["tool"], created_at=d["created_at"], environment=d["environment"], model=d["model"],
            inputs=d["inputs"], reference=d["reference"],
            targets=tuple(TargetResult.from_dict(t) for t in d["targets"]),
            passed=bool(d["passed"]), notes=tuple(d.get("notes") or ()), versions=dict(d.get("versions") or {}),
            output_digests=dict(d.get("output_digests") or {}),
        )
