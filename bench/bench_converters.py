#!/usr/bin/env python3
"""The two ONNX -> TFLite converters side by side: onnx2tf 1.x (the default route: SavedModel, then
TensorFlow's converter) and onnx2tf 2.x's direct backend (``--via TfliteFromOnnx2``), on a LeNet and a
ResNet-50-sized model, each converted afresh (``--no-cache``) by ``portability check --targets
mobile/tflite-fp32`` in a process of its own.

    python bench/bench_converters.py [--rounds 1] [--models lenet,resnet50] [--json OUT.json]

Per model and converter: the conversion's time (the converter steps the check reports), the whole check's
wall time, the peak resident memory of the largest process (``ru_maxrss`` of the check's process tree:
onnx2tf's is the largest), the .tflite size, and its drift against ONNX Runtime (max_abs, cosine). With
``--rounds N`` the times are medians over N rounds (alternating the converters).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONVERTERS = {"onnx2tf 1.x": [], "onnx2tf 2.x": ["--via", "TfliteFromOnnx2"]}


def one(model: Path, via: list[str], out: Path) -> dict:
    """One fresh conversion and check, in this (child) process's own children: their peak memory is this
    process's RUSAGE_CHILDREN alone."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "portability", "check", str(model), "--targets", "mobile/tflite-fp32", *via,
                        "--no-cache", "--samples", "2", "--runs", "5", "--json", str(out), "-q"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if not out.is_file():
        return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1], "wall_s": round(wall, 1)}
    r = json.loads(out.read_text())
    t = next(x for x in r["targets"] if x["id"] == "mobile/tflite-fp32")
    conv = sum(c["seconds"] for c in t["details"].get("conversions", []) if not c["converter"].startswith("OnnxFromOnnx"))
    (o,) = list((t["metrics"].get("outputs") or {"?": {}}).values())[:1]
    return {"status": t["status"], "convert_s": round(conv, 1), "wall_s": round(wall, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
            "size_kb": round(t["artifact"]["size_bytes"] / 1024, 1) if t.get("artifact") else None,
            "max_abs": o.get("max_abs"), "cosine": o.get("cosine"), "error": t.get("error")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--models", default="lenet,resnet50")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # MODEL VIA OUT: a measured run, in its own process
    a = ap.parse_args()
    if a.one:
        model, via, out = a.one
        print(json.dumps(one(Path(model), json.loads(via), Path(out))))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-converters-") as d:
        models = {}
        if "lenet" in a.models:
            models["lenet"] = ROOT / "fixtures" / "lenet.onnx"
        if "resnet50" in a.models:
            sys.path.insert(0, str(ROOT / "bench"))
            from bench_localize import build

            models["resnet50"] = Path(d) / "resnet50.onnx"
            n = build(models["resnet50"])
            print(f"ResNet-50-shaped model: {n} nodes, {models['resnet50'].stat().st_size / 2**20:.0f} MB", flush=True)
        print(f"{'model':<9} {'converter':<12} {'status':<7} {'convert s':>9} {'check s':>8} {'peak MB':>8} "
              f"{'size KB':>9} {'max_abs':>9} {'cosine':>10}", flush=True)
        for name, model in models.items():
            runs: dict[str, list[dict]] = {c: [] for c in CONVERTERS}
            for i in range(a.rounds):
                for conv, via in CONVERTERS.items():
                    out = Path(d) / f"{name}-{len(via)}-{i}.json"
                    p = subprocess.run([sys.executable, __file__, "--one", str(model), json.dumps(via), str(out)],
                                       capture_output=True, text=True)
                    runs[conv].append(json.loads(p.stdout.strip().splitlines()[-1]))
            for conv, rs in runs.items():
                med = {k: statistics.median(r[k] for r in rs) for k in ("convert_s", "wall_s", "peak_rss_mb") if all(k in r for r in rs)}
                last = rs[-1]
                row = {"model": name, "converter": conv, "rounds": len(rs), **last, **med}
                rows.append(row)
                print(f"{name:<9} {conv:<12} {str(row.get('status')):<7} {row.get('convert_s', '-'):>9} {row['wall_s']:>8} "
                      f"{row.get('peak_rss_mb', '-'):>8} {str(row.get('size_kb')):>9} {row.get('max_abs') or 0:>9.2e} "
                      f"{row.get('cosine') or 0:>10.7f}" + (f"  {row['error']}" if row.get("error") else ""), flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
