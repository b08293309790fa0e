#!/usr/bin/env python3
"""Split the test suite into a fast tier and the rest, from a full run's timings.

    python3 -m pytest --junitxml=/tmp/full.xml         # the full suite, once
    python3 scripts/test_tiers.py /tmp/full.xml          # writes tests/slow.txt (more files: later ones win)

A test is slow when it took more than ``--limit`` seconds (setup and teardown included: a module's costly
fixture counts for its first test). Every test file keeps its quickest test in the fast tier, so the fast tier
touches every test file (every feature's tests), unless even that one takes over ``--keep-max`` seconds (the
files left out are printed); the file's costly fixture then comes with it, which the printed total includes. ``tests/conftest.py`` marks the tests listed in ``tests/slow.txt`` ``slow``, and

    python3 -m pytest -m "not slow"                      # the fast tier

runs the rest. The full suite (CI) runs everything.
"""
from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "slow.txt"


def node_id(case: ET.Element) -> str:
    """pytest's node id from a JUnit test case (``tests.test_x.TestY`` + ``test_z[p]``)."""
    parts = case.get("classname", "").split(".")
    mod = [p for p in parts if p.startswith("test_") or p == "tests"]
    path = "/".join(parts[:len(mod)]) + ".py"
    return "::".join([path, *parts[len(mod):], case.get("name", "")])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path, nargs="+", help="JUnit XML files (a later file's timing of a test wins)")
    ap.add_argument("--limit", type=float, default=1.0, help="seconds over which a test is slow (default 1)")
    ap.add_argument("--keep-max", type=float, default=10.0,
                    help="a file's quickest test stays in the fast tier unless it takes longer (default 10 s)")
    args = ap.parse_args()
    times: dict[str, float] = {}
    for junit in args.junit:
        for case in ET.parse(junit).getroot().iter("testcase"):
            if case.find("skipped") is None:
                times[node_id(case)] = float(case.get("time") or 0)
    by_file: dict[str, list[str]] = defaultdict(list)
    for nid in times:
        by_file[nid.split("::")[0]].append(nid)
    quickest = {f: min(ids, key=times.get) for f, ids in by_file.items()}
    keep = {n for n in quickest.values() if times[n] <= args.keep_max}
    left_out = sorted(f for f, n in quickest.items() if n not in keep and times[n] > args.limit)
    slow = sorted((n for n, t in times.items() if t > args.limit and n not in keep), key=lambda n: -times[n])
    fast_total = sum(t for n, t in times.items() if n not in slow)
    lines = ["# tests the fast tier leaves out (python3 -m pytest -m 'not slow'): over "
             f"{args.limit:g} s each in a full run; made by scripts/test_tiers.py",
             *(f"{n}  # {times[n]:.1f} s" for n in slow)]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{len(times)} tests, {sum(times.values()) / 60:.1f} min in all; slow: {len(slow)} "
          f"({sum(times[n] for n in slow) / 60:.1f} min); fast tier: {len(times) - len(slow)} "
          f"({fast_total / 60:.1f} min, {len(by_file) - len(left_out)} of {len(by_file)} files) -> {OUT.relative_to(ROOT)}")
    if left_out:
        print("files with no test in the fast tier (their quickest over --keep-max): " + ", ".join(left_out))


if __name__ == "__main__":
    main()
