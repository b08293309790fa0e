#!/usr/bin/env python3
"""What an audit saves over a shell loop of checks: N small models, all targets, side by side in one run.

    python bench/bench_audit.py [--models 4] [--targets server,web,mobile] [--rounds 2] [--ray]

Side A: ``portability check`` once per model (every check starts its own browsers, emulator and worker
pool). Side B: ``portability audit`` of the same models in one folder (started once). With ``--ray``, also
the same audit through ``--executor ray`` with 1 and with 2 workers (a local Ray instance each time, its
start included). All with a warm artifact cache (one untimed audit first). Printed: the medians of each
side, the marginal cost per model of the audit (its time over the models beyond the first), models per
hour, and the ratios.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("lenet.onnx", "mlp.onnx", "two_outputs.onnx", "int64_ids.onnx", "mlp_dynamic.onnx")


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd[3:6])}... failed ({p.returncode}): {p.stderr[-1500:]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument("--targets", default="server,web,mobile")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ray", action="store_true", help="also time --executor ray with 1 and 2 workers")
    args = ap.parse_args()
    py = [sys.executable, "-m", "portability"]
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "models"
        folder.mkdir()
        for name in MODELS[: args.models]:
            shutil.copyfile(ROOT / "fixtures" / name, folder / name)
        audit = py + ["audit", str(folder), "--targets", args.targets, "--rerun"]
        timed(audit)  # warms the artifact cache
        loop, aud, first = [], [], []
        on_ray: dict[int, list[float]] = {1: [], 2: []}
        for r in range(args.rounds):
            loop.append(sum(timed(py + ["check", str(m), "--targets", args.targets, "--quiet", "--no-history"])
                            for m in sorted(folder.glob("*.onnx"))))
            aud.append(timed(audit))
            single = Path(d) / "one"
            shutil.rmtree(single, ignore_errors=True)
            single.mkdir()
            shutil.copyfile(folder / MODELS[0], single / MODELS[0])
            first.append(timed(py + ["audit", str(single), "--targets", args.targets, "--rerun"]))
            if args.ray:
                for w in on_ray:
                    on_ray[w].append(timed(audit + ["--executor", "ray", "--workers", str(w)]))
            print(f"  round {r + 1}: {args.models} checks {loop[-1]:.1f} s, audit of {args.models} {aud[-1]:.1f} s, "
                  f"audit of 1 {first[-1]:.1f} s"
                  + "".join(f", ray x{w} {v[-1]:.1f} s" for w, v in on_ray.items() if v), flush=True)
    a, b, c = (statistics.median(x) for x in (loop, aud, first))
    marginal = (b - c) / max(1, args.models - 1)
    print(f"{args.models} models, targets {args.targets}, warm cache, medians of {args.rounds}: a loop of checks "
          f"{a:.1f} s ({a / args.models:.1f} s per model); one audit {b:.1f} s; the audit's marginal cost per model "
          f"{marginal:.1f} s ({3600 / marginal:.0f} models per hour beyond start-up); ratio loop/audit {a / b:.2f}")
    for w, v in on_ray.items():
        if v:
            m = statistics.median(v)
            print(f"  --executor ray --workers {w}: {m:.1f} s ({m / b:.2f}x the local audit, {3600 * args.models / m:.0f} models per hour)")


if __name__ == "__main__":
    main()
