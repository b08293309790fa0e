#!/usr/bin/env python3
"""Wall time of a whole check against a single-runtime check of the same model, in one run.

    python bench/bench_check.py [MODEL] [--targets server,web,mobile] [--rounds 3] [--cold]

Side A: ``portability check MODEL --targets server,web,mobile`` (every target converted, loaded, run and
timed), with a warm artifact cache (one untimed run first) — or cold (``--cold``: an empty cache each
round). Side B: the simplest single-runtime check a user can run: ``polygraphy run MODEL --onnxrt`` when
Polygraphy is installed, else a bare script that opens an onnxruntime session and runs it once (Python
start-up and imports included, as for A). Rounds alternate A and B; medians and their ratio are printed.
Goal on a 2-core machine with the fixture LeNet: A ≤ 15 s warm, ≤ 60 s cold.
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
BARE = """
import sys, numpy as np, onnxruntime as ort
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feeds = {i.name: np.random.default_rng(0).random([d if isinstance(d, int) else 1 for d in i.shape], dtype=np.float32)
         for i in s.get_inputs()}
s.run(None, feeds)
"""


def timed(cmd: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 1):  # 1: a gating target failed, still a whole check
        sys.exit(f"{' '.join(cmd[:4])}... failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return dt


def _counts(report: Path) -> tuple[int, int]:
    import json

    targets = json.loads(report.read_text())["targets"]
    skipped = sum(t["status"] == "skipped" for t in targets)
    return len(targets) - skipped, skipped


def main() -> None:
    import os

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(ROOT / "fixtures" / "lenet.onnx"))
    ap.add_argument("--targets", default="server,web,mobile")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="an empty artifact cache for every round of A")
    ap.add_argument("--jobs", type=int, default=None, help="--jobs for A (default: the tool's default)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    cache = Path(tempfile.mkdtemp(prefix="bench-check-cache-"))
    # a private artifact cache, but the ARM64 emulator the user provisioned (it lives in the default cache)
    from portability.mobile import arm64

    env = dict(os.environ, PORTABILITY_CACHE_DIR=str(cache), PORTABILITY_DATA_DIR=str(cache / "data"),
               PORTABILITY_ARM64_DIR=str(arm64.home()))
    report = Path(tempfile.mkdtemp(prefix="bench-check-report-")) / "report.json"  # outlives a cold round's cache
    check = [sys.executable, "-m", "portability", "check", args.model, "--targets", args.targets, "-q", "--no-history",
             "--json", str(report)]
    if args.jobs:
        check += ["--jobs", str(args.jobs)]
    polygraphy = shutil.which("polygraphy")
    bare = [polygraphy, "run", args.model, "--onnxrt"] if polygraphy else [sys.executable, "-c", BARE, args.model]
    try:
        if not args.cold:
            timed(check, env)  # fill the cache
        ran, skipped = _counts(report) if report.is_file() else ("?", "?")
        a, b = [], []
        for i in range(args.rounds):
            if args.cold:
                shutil.rmtree(cache, ignore_errors=True)
            a.append(timed(check, env))
            ran, skipped = _counts(report)
            b.append(timed(bare))
            print(f"round {i + 1}: check {a[-1]:.1f} s, {'polygraphy' if polygraphy else 'bare onnxruntime'} {b[-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(report.parent, ignore_errors=True)
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"\n{ran} targets ran, {skipped} skipped (not available here)")
    print(f"{'cold' if args.cold else 'warm'} cache, {args.targets}: check median {ma:.1f} s (min {min(a):.1f}, max {max(a):.1f}); "
          f"{'polygraphy run --onnxrt' if polygraphy else 'bare onnxruntime session'} median {mb:.2f} s; ratio {ma / mb:.1f}x")


if __name__ == "__main__":
    main()
