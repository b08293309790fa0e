"""What a target's worker may spend: the limits of the typed job the engine hands the worker machinery."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    convert_timeout_s: float
    run_timeout_s: float
    memory_mb: float | None = None
