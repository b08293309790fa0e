#!/usr/bin/env python3
"""The runtime-version matrix over many models: what two ONNX Runtime and two onnxruntime-web versions do
differently, and what a version's environment costs the first time and afterwards.

    python bench/bench_versions.py [MODEL ...] [--ort 1.20.1] [--ort-web 1.22.0] [--targets ...]

Models: those given, else the fixtures' ONNX models and every model the study has exported (run
``portability study --quick`` first). Each is checked once with ``--versions onnxruntime=OLD`` and
``--versions onnxruntime-web=OLD`` against the installed versions; printed per model and target: both
statuses and the worst absolute difference between the versions' outputs. The environments' cost is the
first check's wall time against the second's (each version's environment is built once, then reused).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def models(given: list[str]) -> list[Path]:
    if given:
        return [Path(m) for m in given]
    found = sorted((ROOT / "fixtures").glob("*.onnx")) + sorted((ROOT / "fixtures" / "realworld").glob("*.onnx"))
    sys.path.insert(0, str(ROOT))
    from portability.workers.cache import default_root

    study = default_root() / "study" / "models"
    for meta in sorted(study.glob("*/meta.json")):
        m = json.loads(meta.read_text())
        for name in ("model.onnx", "model.pt2", "model.keras"):
            if (meta.parent / name).is_file() and (m.get("export") or {}).get("status") == "ok":
                found.append(meta.parent / name)
                break
    return found


def check(model: Path, args, out: Path) -> tuple[float, dict | None, str]:
    cmd = [sys.executable, "-m", "portability", "check", str(model), "--targets", args.targets, "--quiet",
           "--no-history", "--json", str(out), "--versions", f"onnxruntime={args.ort}",
           "--versions", f"onnxruntime-web={args.ort_web}"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 1) or not out.is_file():
        return dt, None, (p.stderr.strip().splitlines() or ["no output"])[-1]
    return dt, json.loads(out.read_text()), ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--ort", default="1.20.1")
    ap.add_argument("--ort-web", default="1.22.0")
    ap.add_argument("--targets", default="server/ort-cpu,server/ort-cpu-noopt,mobile/ort-mobile,web/ort-wasm,web/ort-webgpu")
    args = ap.parse_args()
    ms = models(args.models)
    print(f"{len(ms)} models; onnxruntime {args.ort} vs installed, onnxruntime-web {args.ort_web} vs installed")
    differed, times = [], []
    with tempfile.TemporaryDirectory() as d:
        for i, m in enumerate(ms):
            dt, report, err = check(m, args, Path(d) / "r.json")
            if i == 0:
                dt2, _, _ = check(m, args, Path(d) / "r2.json")
                times = [dt, dt2]
            if report is None:
                print(f"{m.name}: check failed: {err}")
                continue
            for row in (report.get("versions") or {}).get("rows", []):
                cells = row["cells"]
                statuses = {v: c["status"] for v, c in cells.items()}
                worst = max((c.get("worst_max_abs_vs_others") or 0.0) for c in cells.values())
                line = f"  {m.parent.name}/{m.name:<28} {row['target']:<22} " + \
                       "  ".join(f"{row['package']} {v}: {s}" for v, s in statuses.items()) + f"  max |Δ| {worst:.3g}"
                print(line)
                if len(set(statuses.values())) > 1 or worst > 0:
                    differed.append(line)
    if times:
        print(f"\nfirst check (environments built if new) {times[0]:.1f} s, second (reused) {times[1]:.1f} s")
    print(f"\n{len(differed)} model x target pairs differ between versions" + (":" if differed else ""))
    for line in differed:
        print(line)


if __name__ == "__main__":
    main()
