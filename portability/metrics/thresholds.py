"""Thresholds: the defaults every metric declares, merged with the target's and the user's bounds."""
from __future__ import annotations

from portability.metrics import default_thresholds

#: a bound of None is not checked
DEFAULTS: dict[str, float | None] = default_thresholds()


def merged(*layers: dict | None) -> dict[str, float | None]:
    out = dict(DEFAULTS)
    for layer in layers:
        for k, v in (layer or {}).items():
            if k not in DEFAULTS:
                raise KeyError(k)
            out[k] = v
    return out
