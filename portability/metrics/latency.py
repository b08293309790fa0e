"""Latency summary from the per-run milliseconds a worker measured around the runtime call."""
from __future__ import annotations

import numpy as np


def summarize(raw: dict | None) -> dict | None:
    """``{"load", "first", "samples": [...], ...extras}`` -> load, first, p50, p90, p99, runs (+ extras)."""
    if not raw:
        return None
    out = {k: v for k, v in raw.items() if k != "samples"}
    s = np.asarray(raw.get("samples") or [], dtype=np.float64)
    if s.size:
        out.update(p50=float(np.percentile(s, 50)), p90=float(np.percentile(s, 90)),
                   p99=float(np.percentile(s, 99)), min=float(s.min()), runs=int(s.size))
    else:
        out["runs"] = 0
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}
