#!/usr/bin/env python3
"""Wall time of a whole check against a single-runtime check of the same model, in one run.

    python bench/bench_check.py [MODEL] [--targets all] [--rounds 3] [--cold]

Side A: ``portability check MODEL --targets all`` (every target converted, loaded, run and timed) with the
resident session running (its browsers and emulator started by one untimed check first, as a user's earlier
check would have). Side A0: the same check with ``--resident off`` (it starts and stops its own services).
Both with a warm artifact cache (the untimed check fills it) — or cold (``--cold``: each round a new model, MODEL
with one weight nudged, so that neither the artifact cache nor the resident session's kept pages have seen it: the
first check of a new model; an input other than ONNX is checked as it is, with an empty cache). Side B: the simplest single-runtime check a user can run: ``polygraphy run MODEL --onnxrt`` when
Polygraphy is installed, else a bare script that opens an onnxruntime session and runs it once (Python
start-up and imports included, as for A). Rounds alternate A, A0 and B; medians and their ratios are printed.
Goal on a 2-core machine with the fixture LeNet: A ≤ 5 s warm.

Also printed, for A, the two bounds below which no scheduling can bring it on this machine: the CPU the whole
machine spent busy during the check (the check's, the resident session's, the browsers' and the emulator's
processes: run it on a quiet machine) over its cores, and the work that runs one target after another — the
timing (each target alone, by design) after the longest chain of correctness work of one group of targets that
share a process (``Runtime.contends``: a browser's GPU process), from the report's ``details.phases_s``.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
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


def cpu_busy_s() -> float:
    """Seconds of CPU time the whole machine has spent busy since it started (``/proc/stat``)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def serial_work(report: Path) -> tuple[float, float, str]:
    """From a check's report: the seconds its targets spent timing (one at a time), the longest sum of the
    correctness work (start, convert, load, infer) of the targets of one group (they work one at a time) and
    that group's name."""
    from portability.core.target import load_class
    from portability.targets import registry

    reg, timing, chains = registry(), 0.0, collections.Counter()
    for t in json.loads(report.read_text())["targets"]:
        phases = (t.get("details") or {}).get("phases_s") or {}
        timing += phases.get("time", 0.0)
        target = reg.get(t["id"])
        group = load_class(target.runtime).facts(target.options).contends if target else None
        if group:
            chains[group] += sum(phases.get(k, 0.0) for k in ("start", "convert", "load", "infer"))
    group, chain = chains.most_common(1)[0] if chains else ("", 0.0)
    return timing, chain, group


def _counts(report: Path) -> tuple[int, int]:
    targets = json.loads(report.read_text())["targets"]
    skipped = sum(t["status"] == "skipped" for t in targets)
    return len(targets) - skipped, skipped


def nudged(model: str, folder: Path, seed: int) -> str:
    """A copy of an ONNX ``model`` with its first float initializer nudged (seeded): a model no cache has seen, of
    the same graph and shapes. Another format: ``model`` itself."""
    if not model.endswith(".onnx"):
        return model
    import numpy as np
    import onnx
    from onnx import numpy_helper

    m = onnx.load(model)
    for init in m.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            a = numpy_helper.to_array(init).copy()
            a += np.float32(1e-3) * np.random.default_rng(seed).standard_normal(a.shape).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(a, init.name))
            break
    out = folder / f"new{seed}.onnx"
    onnx.save(m, out)
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(ROOT / "fixtures" / "lenet.onnx"))
    ap.add_argument("--targets", default="all")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="a new model (one weight nudged) for every round")
    ap.add_argument("--jobs", type=int, default=None, help="--jobs for A (default: the tool's default)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    cache = Path(tempfile.mkdtemp(prefix="bench-check-cache-"))
    # a private artifact cache, but the ARM64 emulator the user provisioned (it lives in the default cache)
    from portability.mobile import arm64

    env = dict(os.environ, PORTABILITY_CACHE_DIR=str(cache), PORTABILITY_DATA_DIR=str(cache / "data"),
               PORTABILITY_ARM64_DIR=str(arm64.home()))
    sock = Path(tempfile.mkdtemp(prefix="bench-check-res-")) / "serve.sock"
    resident = dict(env, PORTABILITY_RESIDENT="auto", PORTABILITY_SERVE_SOCKET=str(sock))
    own = dict(env, PORTABILITY_RESIDENT="off")
    report = Path(tempfile.mkdtemp(prefix="bench-check-report-")) / "report.json"  # outlives a cold round's cache
    check = [sys.executable, "-m", "portability", "check", args.model, "--targets", args.targets, "-q", "--no-history",
             "--json", str(report)]
    if args.jobs:
        check += ["--jobs", str(args.jobs)]
    polygraphy = shutil.which("polygraphy")
    bare = [polygraphy, "run", args.model, "--onnxrt"] if polygraphy else [sys.executable, "-c", BARE, args.model]
    try:
        first = timed(check, resident)  # fills the cache and starts the resident session
        print(f"first check (starts the resident session{'' if args.cold else ', fills the cache'}): {first:.1f} s", flush=True)
        ran, skipped = _counts(report) if report.is_file() else ("?", "?")
        a, a0, b, busy, timing, chain = [], [], [], [], [], []
        for i in range(args.rounds):
            if args.cold:
                shutil.rmtree(cache, ignore_errors=True)
                check[4] = nudged(args.model, report.parent, i)
            c0 = cpu_busy_s()
            a.append(timed(check, resident))
            busy.append(cpu_busy_s() - c0)
            ran, skipped = _counts(report)
            t, c, group = serial_work(report)
            timing.append(t)
            chain.append(c)
            if args.cold:
                shutil.rmtree(cache, ignore_errors=True)
                check[4] = nudged(args.model, report.parent, i + args.rounds)
            a0.append(timed(check, own))
            b.append(timed(bare))
            print(f"round {i + 1}: check {a[-1]:.1f} s (resident; the machine's CPU busy {busy[-1]:.1f} s, timing "
                  f"{timing[-1]:.1f} s, {group or 'no group'} {chain[-1]:.1f} s), {a0[-1]:.1f} s (--resident off), "
                  f"{'polygraphy' if polygraphy else 'bare onnxruntime'} {b[-1]:.2f} s", flush=True)
    finally:
        subprocess.run([sys.executable, "-m", "portability", "serve", "--stop"], env=resident, capture_output=True)
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(report.parent, ignore_errors=True)
        shutil.rmtree(sock.parent, ignore_errors=True)
    ma, ma0, mb = statistics.median(a), statistics.median(a0), statistics.median(b)
    print(f"\n{ran} targets ran, {skipped} skipped (not available here)")
    bare_name = "polygraphy run --onnxrt" if polygraphy else "bare onnxruntime session"
    print(f"{'cold' if args.cold else 'warm'} cache, {args.targets}: check median {ma:.1f} s with the resident session "
          f"(min {min(a):.1f}, max {max(a):.1f}), {ma0:.1f} s without (min {min(a0):.1f}, max {max(a0):.1f}); "
          f"{bare_name} median {mb:.2f} s; ratios {ma / mb:.1f}x and {ma0 / mb:.1f}x; resident/own {ma / ma0:.2f}")
    cores, mbusy, mt, mc = os.cpu_count() or 1, statistics.median(busy), statistics.median(timing), statistics.median(chain)
    print(f"bounds of the resident check (medians): the machine's CPU busy {mbusy:.1f} s over {cores} cores, at least "
          f"{mbusy / cores:.1f} s; one target after another: {group or 'no group'}'s correctness work {mc:.1f} s, then "
          f"the timing {mt:.1f} s, at least {mc + mt:.1f} s")


if __name__ == "__main__":
    main()
