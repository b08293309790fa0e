#!/usr/bin/env python3
"""What the OS sandbox costs: per process start, and on a whole warm check, side by side in one run.

    python bench/bench_sandbox.py [MODEL] [--targets server,web,mobile] [--rounds 5] [--starts 200]

Part 1, per start: a forked child that exits at once, against one that first enters the sandbox a worker
enters (Landlock rules for the system, the model's, run's and cache folders, and its own network namespace
where it may make one); the medians of ``--starts`` children each, and the difference.
Part 2, per check: ``portability check MODEL --targets ...`` with a warm cache, ``--sandbox auto`` against
``--sandbox off``, rounds alternating; medians of the wall times and their ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _start(sb, tmp: Path) -> float:
    """Milliseconds from fork to the reaped exit of a child that enters ``sb`` first (None: enters nothing)."""
    from portability.core.sandbox import enter

    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            if sb is not None and enter(sb) is not None:
                code = 3
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"a sandboxed child failed (exit {os.waitstatus_to_exitcode(status)})")
    return (time.perf_counter() - t0) * 1e3


def per_start(starts: int, model: Path) -> None:
    from portability.core.sandbox import Sandbox, status

    ok, why = status()
    if not ok:
        print(f"per start: no sandbox here ({why})")
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        sb = Sandbox(mode="require", read=(str(model.parent), str(tmp), str(Path.home() / ".cache")),
                     write=(str(tmp),), write_until_narrowed=(str(tmp),))
        bare, boxed = [], []
        for _ in range(starts):  # alternating, so that drift of the machine hits both
            bare.append(_start(None, tmp))
            boxed.append(_start(sb, tmp))
    b, s = statistics.median(bare), statistics.median(boxed)
    print(f"per start ({why}): fork+exit {b:.2f} ms, fork+sandbox+exit {s:.2f} ms "
          f"(median of {starts}): the sandbox adds {s - b:.2f} ms per process")


def _check(model: Path, targets: str, mode: str) -> float:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "portability", "check", str(model), "--targets", targets,
                        "--sandbox", mode, "--quiet"], capture_output=True, text=True, cwd=ROOT)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        sys.exit(f"check --sandbox {mode} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return dt


def per_check(model: Path, targets: str, rounds: int) -> None:
    _check(model, targets, "auto")  # warms the artifact cache
    on, off = [], []
    for r in range(rounds):
        on.append(_check(model, targets, "auto"))
        off.append(_check(model, targets, "off"))
        print(f"  round {r + 1}: sandboxed {on[-1]:.2f} s, unsandboxed {off[-1]:.2f} s", flush=True)
    a, b = statistics.median(on), statistics.median(off)
    print(f"per check ({targets}, warm, median of {rounds}): sandboxed {a:.2f} s, unsandboxed {b:.2f} s, "
          f"ratio {a / b:.3f} (range of unsandboxed rounds {min(off):.2f}-{max(off):.2f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(ROOT / "fixtures" / "lenet.onnx"))
    ap.add_argument("--targets", default="server,web,mobile")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--starts", type=int, default=200)
    args = ap.parse_args()
    model = Path(args.model).resolve()
    per_start(args.starts, model)
    if args.rounds > 0:
        per_check(model, args.targets, args.rounds)


if __name__ == "__main__":
    main()
