#!/usr/bin/env python3
"""A detector-sized model on every target: where the minutes go, target by target.

    python bench/bench_slow_targets.py [--targets all] [--json OUT.json]

Builds (seeded, in a temporary folder) a convolutional detector of the size of a document-layout model:
input 1x3x800x608, five stride-2 stages of 3x3 convolutions (32 to 512 channels) and a 1x1 head, about
1.6 M parameters (6.4 MB) and 2.3 GMAC per inference. Runs ``portability check MODEL --targets all`` once
and prints the wall time, each target's status and time, and what the report says about samples and
timing (``details.samples``, ``latency_ms.runs``). Compare two versions of the tool by running the script
with each: the verdicts must be the same.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build(path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev, cin = "images", 3
    for i, cout in enumerate((32, 64, 128, 256, 512)):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), f"b{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], strides=[2, 2], pads=[1, 1, 1, 1],
                                      name=f"stage{i}/conv"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"stage{i}/relu"))
        prev, cin = f"r{i}", cout
    head = (rng.standard_normal((85, cin, 1, 1)) * 0.05).astype(np.float32)
    inits.append(numpy_helper.from_array(head, "head"))
    nodes.append(helper.make_node("Conv", [prev, "head"], ["boxes"], name="head/conv"))
    g = helper.make_graph(nodes, "detector", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 800, 608])],
                          [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 85, 25, 19])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="portability-bench")
    m.ir_version = 8
    onnx.save(m, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="all")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-detector-") as d:
        model = Path(d) / "detector.onnx"
        build(model)
        size = model.stat().st_size
        out = args.json or Path(d) / "report.json"
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "portability", "check", str(model), "--targets", args.targets,
                            "--json", str(out), "--no-history", "-q"], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if not out.is_file():
            sys.exit(f"the check wrote no report (exit {p.returncode}): {p.stderr[-2000:]}")
        r = json.loads(out.read_text())
    print(f"detector 1x3x800x608, {size / 2**20:.1f} MB; --targets {args.targets}: "
          f"{wall:.0f} s wall (exit {p.returncode})")
    for t in r["targets"]:
        lat = (t.get("metrics") or {}).get("latency_ms") or {}
        samples = (t.get("details") or {}).get("samples") or {}
        cut = f", checked {samples['batches']} of {samples['of']} batches" if samples else ""
        print(f"  {t['id']:<24} {t['status']:<13} done after {t.get('duration_s') or 0:7.1f} s  timed runs "
              f"{lat.get('runs', '–')}{cut}")


if __name__ == "__main__":
    main()
