"""The report of a fixture check stays the same, field for field, apart from timings and the machine.

The golden files in ``tests/golden/`` are normalized reports of server-only checks (fast, and independent
of the optional stacks). A refactoring of the pipeline, the worker protocol or the metrics must leave
them unchanged. Regenerate them, after a change that is meant to alter the report, with
``PORTABILITY_UPDATE_GOLDEN=1 python3 -m pytest tests/test_report_golden.py`` and review the diff.
"""
from __future__ import annotations

import json
import math
import os

import pytest

from conftest import FIXTURES, check_json

GOLDEN = FIXTURES.parent / "tests" / "golden"
CASES = {
    "lenet_dataset": ("lenet.onnx", "--dataset", str(FIXTURES / "digits.npz")),
    "two_outputs": ("two_outputs.onnx",),
    "int64_ids": ("int64_ids.onnx",),
    "mlp_dynamic": ("mlp_dynamic.onnx", "--shape", "x=2x1x28x28"),
}
TARGETS = "server/ort-cpu-noopt,server/onnx-reference"
#: values that depend on the machine, the clock or the cache, not on the check's logic (the outputs' digests
#: and sampled elements are the CPU's float rounding: tests/test_golden.py checks what they are for)
_VOLATILE_TOP = ("created_at", "environment", "output_digests")
_VOLATILE_METRICS = ("latency_ms", "p50_vs_reference", "peak_rss_mb")


def normalize(report: dict) -> dict:
    r = {k: v for k, v in report.items() if k not in _VOLATILE_TOP}
    r["tool"] = {"name": report["tool"]["name"]}
    r["model"] = dict(report["model"], path=os.path.basename(report["model"]["path"]))
    r["inputs"] = dict(report["inputs"], path=os.path.basename(report["inputs"]["path"] or "") or None)
    targets = []
    for t in report["targets"]:
        t = dict(t, duration_s=None)
        t["metrics"] = {k: (v if k not in _VOLATILE_METRICS else (v is not None)) for k, v in t["metrics"].items()}
        d = dict(t.get("details") or {})
        d["conversions"] = [{k: v for k, v in c.items() if k not in ("seconds", "cached")} for c in d.get("conversions", [])]
        for k in ("log_tail", "timing", "phases_s"):
            d.pop(k, None)
        if "artifact_meta" in d:
            d["artifact_meta"] = {k: v for k, v in d["artifact_meta"].items() if k not in ("convert_s",)}
        t["details"] = d
        t["notes"] = [n for n in t["notes"] if "timing budget" not in n]
        targets.append(t)
    r["targets"] = targets
    return r


#: a target's output drift at float32 rounding (signal over noise of 100 dB or more): its exact noise figures
#: depend on the CPU's kernels (ONNX Runtime's MLAS, numpy's BLAS pick code paths per CPU), not on the check
_NOISE = ("max_abs", "max_rel", "mean_abs", "rmse", "p99_abs", "snr_db")
NOISE_FLOOR_DB = 100.0


def rounding_noise(report: dict) -> dict:
    """``report`` with the noise figures of outputs that agree to float32 rounding replaced by a marker."""
    out = json.loads(json.dumps(report))
    for t in out.get("targets", []):
        for o in ((t.get("metrics") or {}).get("outputs") or {}).values():
            snr = o.get("snr_db")
            if snr is not None and float(snr) >= NOISE_FLOOR_DB:
                o.update({k: "float32 rounding" for k in _NOISE if k in o})
    return out


def same(a, b, path="report") -> list[str]:
    """Differences between two normalized reports (floats within 1e-6 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in {'golden' if k in a else 'new'}" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            out += same(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items, now {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) else [f"{path}: {a!r} -> {b!r}"]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


@pytest.mark.parametrize("name", list(CASES))
def test_report_matches_golden(tmp_path, name):
    model, *args = CASES[name]
    got = normalize(check_json(tmp_path, FIXTURES / model, "--targets", TARGETS, "--runs", "3", "--warmup", "1", *args))
    path = GOLDEN / f"{name}.json"
    if os.environ.get("PORTABILITY_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    golden = json.loads(path.read_text())
    diffs = same(rounding_noise(golden), rounding_noise(got))
    assert not diffs, "report changed:\n" + "\n".join(sorted(diffs)[:40])
