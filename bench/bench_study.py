#!/usr/bin/env python3
"""Wall time of the quick study, split into training, conversion and evaluation.

    python bench/bench_study.py [--rounds 2] [-- extra study flags, e.g. -f torch -m lenet5]

Round 1 runs ``portability study --quick`` with an empty cache (every model trained, every artifact
converted); later rounds reuse that cache (nothing trained, nothing converted: the time left is the
evaluation itself). From each run's JSON: training seconds, and within deployment the target-seconds
spent converting against loading, running and timing (targets overlap under --jobs, so these are worker
seconds, not wall time), next to the whole wall time of the command.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def phases(study: dict) -> dict[str, float]:
    out = {"convert": 0.0, "evaluate": 0.0}
    for row in study["rows"]:
        for t in (row.get("check") or {}).get("targets", []):
            for phase, s in ((t.get("details") or {}).get("phases_s") or {}).items():
                out["convert" if phase == "convert" else "evaluate"] += s
    return out


def run(cache: Path, extra: list[str]) -> dict:
    out = cache / "study.json"
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "portability", "study", "--quick", "--cache-dir", str(cache), "-q",
                        "--json", str(out), *extra], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"study failed ({p.returncode}):\n{p.stderr[-3000:]}")
    study = json.loads(out.read_text())
    s = study["seconds"]
    ph = phases(study)
    return {"wall": wall, "train": s["train"], "deploy": s["check"], "data": s["data"], "convert_ts": ph["convert"],
            "evaluate_ts": ph["evaluate"], "rows": len(study["rows"]),
            "targets": sum(len(r["targets"]) for r in study["rows"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="runs: the first cold, the rest on its cache")
    ap.add_argument("extra", nargs="*", help="more study flags (after --)")
    a = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="bench-study-"))
    try:
        results = [run(cache, a.extra) for _ in range(max(1, a.rounds))]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    cols = ("wall", "data", "train", "deploy", "convert_ts", "evaluate_ts")
    print(f"quick study: {results[0]['rows']} models, {results[0]['targets']} target runs each round")
    print(f"{'round':<12}" + "".join(f"{c:>13}" for c in cols) + "   (seconds; *_ts: summed over targets)")
    for i, r in enumerate(results):
        print(f"{'cold' if i == 0 else f'cached {i}':<12}" + "".join(f"{r[c]:>13.1f}" for c in cols))
    if len(results) > 2:
        warm = results[1:]
        print(f"{'median warm':<12}" + "".join(f"{statistics.median(r[c] for r in warm):>13.1f}" for c in cols))


if __name__ == "__main__":
    main()
