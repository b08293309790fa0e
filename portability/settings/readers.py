"""How each setting's value is read into ``CheckOptions`` (``Setting.parse``): numbers with their bounds, paths,
comma lists, the tables of a settings file — each a UsageError naming the flag for a bad value.

Light module: no numpy, no heavy import.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from portability.core.errors import UsageError
from portability.settings.setting import Setting

#: the share of this machine's memory a target may use when no limit is given
MEMORY_SHARE = 0.8


def _path(v: Any, s: Setting) -> Path | None:
    return Path(v) if v is not None else None


def _number(kind: type) -> Callable[[Any, Setting], Any]:
    def read(v: Any, s: Setting) -> Any:
        if v is None:
            return None
        try:
            n = kind(v)
        except (TypeError, ValueError):
            raise UsageError(f"{s.option} must be a {'whole ' if kind is int else ''}number, got {v!r}") from None
        if s.min is not None and n < s.min:
            raise UsageError(f"{s.option} must be at least {s.min:g}, got {n:g}")
        return n

    return read


def _targets(v: Any, s: Setting) -> str:
    return v if isinstance(v, str) else ",".join(v)


def _range(v: Any, s: Setting) -> tuple[float, float]:
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


def _gate(value: Any, s: Setting) -> list[str]:
    items = [value] if isinstance(value, str) else list(value or [])
    return [g.strip() for item in items for g in str(item).split(",") if g.strip()]


def _memory(mb: Any, s: Setting) -> float:
    if mb is None:
        import psutil

        return psutil.virtual_memory().total / 2**20 * MEMORY_SHARE
    if float(mb) <= 0:
        raise UsageError("--memory-limit-mb must be positive")
    return float(mb)


def _jobs(v: Any, s: Setting) -> int:
    return _number(int)(v, s) if v is not None else default_jobs()


def _versions(v: Any, s: Setting) -> dict:
    """``["onnxruntime=1.20.1,1.31.1"]`` (flags) or ``{"onnxruntime": ["1.20.1"]}`` (a settings file)."""
    from portability.matrix import parse

    if isinstance(v, dict):
        v = [f"{k}={','.join(x) if isinstance(x, (list, tuple)) else x}" for k, x in v.items()]
    return parse([v] if isinstance(v, str) else list(v or []))


def _prompt(v: Any, s: Setting) -> tuple[int, ...]:
    from portability.core.generate import prompt_ids  # numpy and the decoder's reading: not at --help

    return prompt_ids(v, s.option)


def _sandbox(v: Any, s: Setting) -> str:
    from portability.core.sandbox import MODES, default_mode

    v = default_mode() if v is None else v
    if str(v) not in MODES:
        raise UsageError(f"--sandbox must be one of {', '.join(MODES)}, got '{v}'")
    return str(v)


def _resident(v: Any, s: Setting) -> str:
    from portability.resident.client import mode

    if v is None:
        return mode()
    v = {True: "auto", False: "off"}.get(v, v)
    if str(v) not in ("auto", "off"):
        raise UsageError(f"--resident must be auto or off, got '{v}'")
    return str(v)


def _shapes(v: Any, s: Setting) -> list[str]:
    """``["x=1x3x224x224"]`` or ``{"x": [1, 3, 224, 224]}`` -> the ``--shape`` strings."""
    if isinstance(v, dict):
        return [f"{k}={'x'.join(str(int(d)) for d in dims)}" for k, dims in v.items()]
    return list(v or [])


def _tables(v: Any, s: Setting) -> dict:
    """A table of tables (name -> options), as a settings file gives it."""
    if v is None:
        return {}
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, dict) for k, x in v.items()):
        raise UsageError(f"{s.name} must be a table of tables (name -> options), got {v!r}"[:300])
    return {k: dict(x) for k, x in v.items()}


def default_jobs() -> int:
    """One more than the cores: a target waiting on a browser's or an emulator's process leaves its core to
    another (a warm all-target check of the fixture LeNet on 2 cores: 12.9 s at 2, 11.9 s at 3, 12.0 s at 4)."""
    import os

    return max(1, os.cpu_count() or 1) + 1
