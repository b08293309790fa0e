#!/usr/bin/env python3
"""``portability localize`` on a ResNet-50-sized model: checks (conversions) against the graph's node
count, wall time and peak memory, for the two ways it localizes.

    python bench/bench_localize.py [--samples 2] [--json OUT.json] [--cases ort,bisect]

Builds (seeded, in a temporary folder) a ResNet-50-shaped ONNX model: a 7x7 stem, bottleneck stages of
3, 4, 6 and 3 blocks (64 to 2048 channels, batch norm folded into the convolutions), global average pooling
and a 1000-way Gemm: 25.5 M parameters, about 100 MB, 1x3x224x224. Then, each as a separate
``portability localize`` process:

- ``ort``: ``server/ort-int8`` (ONNX Runtime on the dynamically quantized model) with a cosine bound of
  0.99999999, so that the int8 rounding diverges somewhere: every node's output comes back in runs of at
  most 256 MB (the "every node's outputs" way);
- ``bisect``: ``mobile/tflite-fp32`` (onnx2tf, LiteRT) with bounds of 1e-12, so that float rounding
  diverges at some node: a bisection over the topological order, one onnx2tf conversion per cut.

For each: the nodes, the checks it ran (each one conversion of a cut on the target), log2(nodes), the wall
time, and the peak resident memory of the largest process (``ru_maxrss`` of the localize process and of
its children: the workers, the converter, the browser).
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build(path: Path) -> int:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def conv(x: str, cin: int, cout: int, k: int, stride: int, name: str, relu: bool = True) -> str:
        w = (rng.standard_normal((cout, cin, k, k)) * math.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.w"), numpy_helper.from_array(np.zeros(cout, np.float32), f"{name}.b")])
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.c"], strides=[stride, stride],
                                      pads=[k // 2] * 4, name=f"{name}/conv"))
        if not relu:
            return f"{name}.c"
        nodes.append(helper.make_node("Relu", [f"{name}.c"], [f"{name}.r"], name=f"{name}/relu"))
        return f"{name}.r"

    x = conv("images", 3, 64, 7, 2, "stem")
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], name="stem/pool"))
    x, cin = "pool", 64
    for s, (blocks, width) in enumerate(((3, 64), (4, 128), (6, 256), (3, 512))):
        for b in range(blocks):
            name, stride = f"s{s}b{b}", (2 if b == 0 and s > 0 else 1)
            h = conv(x, cin, width, 1, 1, f"{name}.a")
            h = conv(h, width, width, 3, stride, f"{name}.b")
            h = conv(h, width, width * 4, 1, 1, f"{name}.c", relu=False)
            short = conv(x, cin, width * 4, 1, stride, f"{name}.down", relu=False) if b == 0 else x
            nodes.append(helper.make_node("Add", [h, short], [f"{name}.sum"], name=f"{name}/add"))
            nodes.append(helper.make_node("Relu", [f"{name}.sum"], [f"{name}.out"], name=f"{name}/out"))
            x, cin = f"{name}.out", width * 4
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="head/gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="head/flatten"))
    fc = (rng.standard_normal((1000, 2048)) * math.sqrt(1.0 / 2048)).astype(np.float32)
    inits.extend([numpy_helper.from_array(fc, "fc.w"), numpy_helper.from_array(np.zeros(1000, np.float32), "fc.b")])
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1, name="head/fc"))
    g = helper.make_graph(nodes, "resnet50_shaped", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 224, 224])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="portability-bench")
    m.ir_version = 8
    onnx.save(m, path)
    return len(nodes)


CASES = {
    "ort": ("server/ort-int8", ["--cosine", "0.99999999"]),
    "bisect": ("mobile/tflite-fp32", ["--max-abs", "1e-12", "--cosine", "0.999999999999"]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", default="2")
    ap.add_argument("--cases", default="ort,bisect")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-localize-") as d:
        model = Path(d) / "resnet50.onnx"
        n = build(model)
        print(f"ResNet-50-shaped model: {n} nodes, {model.stat().st_size / 2**20:.0f} MB", flush=True)
        for case in args.cases.split(","):
            target, bounds = CASES[case]
            out = Path(d) / case
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "portability", "localize", str(model), "--target", target,
                                "--samples", args.samples, "--out", str(out), "--json", str(out / "doc.json"), "-q", *bounds],
                               capture_output=True, text=True)
            wall = time.perf_counter() - t0
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far, MB
            if not (out / "doc.json").is_file():
                sys.exit(f"{case}: localize wrote nothing (exit {p.returncode}): {p.stderr[-2000:]}")
            doc = json.loads((out / "doc.json").read_text())
            first = doc.get("first_divergence") or {}
            rows.append({"case": case, "target": target, "method": doc.get("method"), "nodes": doc["nodes"],
                         "checks": doc["conversions"], "log2_nodes": round(math.log2(doc["nodes"]), 1),
                         "wall_s": round(wall, 1), "peak_rss_mb": round(peak), "first": first.get("node"),
                         "reproduces": (doc.get("reproducer") or {}).get("reproduces")})
            r = rows[-1]
            print(f"  {case:<7} {target:<20} {r['method']}: {r['checks']} checks for {r['nodes']} nodes "
                  f"(log2 {r['log2_nodes']}), {r['wall_s']} s, peak RSS {r['peak_rss_mb']} MB; first diverging "
                  f"node {r['first']}, reproducer reproduces: {r['reproduces']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
