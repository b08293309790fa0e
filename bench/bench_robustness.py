#!/usr/bin/env python3
"""How the robustness pass scales: a check with ``--robustness`` at a few sample counts against the same
check without it, in one run (warm artifact cache: one untimed check first).

    python bench/bench_robustness.py [MODEL] [--dataset NPZ] [--targets server/ort-cpu,mobile/tflite-fp32,mobile/tflite-int8]
                                     [--samples 16,64,128] [--rounds 1]

Per sample count: the wall time of the whole check, its extra over the plain check, the perturbed inputs
each target ran (samples × perturbations), and per target the seconds its worker spent running batches
(the ``infer`` phase: clean and perturbed batches in one call). Goal: the extra per target stays close
to its inference time on the perturbed set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_check(model: str, dataset: str, targets: str, extra: list[str], env: dict, clean: int) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        cmd = [sys.executable, "-m", "portability", "check", model, "--dataset", dataset, "--samples", str(clean),
               "--targets", targets, "--json", str(out), "-q", "--no-history", *extra]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        dt = time.perf_counter() - t0
        if p.returncode not in (0, 1):
            sys.exit(f"check failed ({p.returncode}):\n{p.stderr[-2000:]}")
        return dt, json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(ROOT / "fixtures" / "lenet.onnx"))
    ap.add_argument("--dataset", default=str(ROOT / "fixtures" / "digits.npz"))
    ap.add_argument("--targets", default="server/ort-cpu,mobile/tflite-fp32,mobile/tflite-int8")
    ap.add_argument("--samples", default="16,64,128", help="robustness sample counts to time")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="bench-rob-cache-"))
    env = dict(os.environ, PORTABILITY_CACHE_DIR=str(cache), PORTABILITY_DATA_DIR=str(cache / "data"))
    counts = [int(s) for s in args.samples.split(",")]
    clean = max(counts)  # the clean pass is the same in every row: the robustness pass takes its first rows
    run_check(args.model, args.dataset, args.targets, [], env, clean)  # warm the cache: conversions are not measured
    rows = []
    base = statistics.median(run_check(args.model, args.dataset, args.targets, [], env, clean)[0] for _ in range(args.rounds))
    for n in counts:
        times, report = [], None
        for _ in range(args.rounds):
            dt, report = run_check(args.model, args.dataset, args.targets, ["--robustness", "--robustness-samples", str(n)], env, clean)
            times.append(dt)
        desc = report["inputs"]["robustness"]
        groups = sum(len(v) for v in desc["families"].values())
        infer = {t["id"]: (t.get("details") or {}).get("phases_s", {}).get("infer") for t in report["targets"]}
        flips = {t["id"]: ((t["metrics"].get("robustness") or {}).get("worst_flip_rate")) for t in report["targets"]}
        rows.append((n, desc["samples"], groups, statistics.median(times), infer, flips))
    tids = [t["id"] for t in report["targets"]]
    print(f"model {Path(args.model).name}, targets {args.targets}; plain check ({clean} clean samples): {base:.2f} s")
    print(f"{'samples':>7} {'perturbed/target':>16} {'wall s':>7} {'extra s':>7}  " + "  ".join(f"{t.split('/')[-1] + ' infer s':>18}" for t in tids))
    for n, s, g, wall, infer, _ in rows:
        cells = "  ".join(f"{infer[t]:>18.2f}" if infer[t] is not None else f"{'–':>18}" for t in tids)
        print(f"{s:>7} {s * g:>16} {wall:>7.2f} {wall - base:>7.2f}  {cells}")
    print("worst flip rate at the largest count: " + ", ".join(f"{t}={rows[-1][5][t]}" for t in tids))


if __name__ == "__main__":
    main()
