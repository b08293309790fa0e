"""Peak memory of a target's worker (its whole process tree: a browser, an emulator), in MB."""
from __future__ import annotations

FIELDS = {"peak_rss_mb": None}
THRESHOLDS: dict = {}


def compute(ev) -> tuple[dict, list[str]]:
    return {"peak_rss_mb": ev.worker.peak_rss_mb}, []


def breaches(metrics: dict, t: dict) -> list[str]:
    return []
