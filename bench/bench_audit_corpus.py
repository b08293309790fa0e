#!/usr/bin/env python3
"""An audit of a real corpus, killed halfway and resumed, and the same audit on Ray: same scorecard?

    python bench/bench_audit_corpus.py [--targets server,web,mobile] [--ops 12] [--workers 2]

The corpus (a manifest written in a temporary folder): the fixtures (each with its settings: LeNet with its
labelled digits, the dynamic MLP with a shape), the models the study exported (found in the cache's
``study/models``: run ``portability study --quick`` once first; without them the corpus is smaller), and
one ONNX conformance case for each of ``--ops`` common op types, with the spec's expected outputs.

1. ``audit MANIFEST`` whole (timed);
2. the audit's state removed, ``audit MANIFEST`` killed (SIGKILL, the whole process group) once half its
   models finished, then ``audit MANIFEST``: it must keep those, check only the others and give the first
   run's scorecard;
3. ``audit MANIFEST --rerun --executor ray --workers N`` on a local Ray instance: the same scorecard.

Scorecards are compared without latency (it varies run to run). Prints the times and the verdicts.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
COMMON_OPS = ("Conv", "Relu", "MaxPool", "Gemm", "MatMul", "Add", "Softmax", "Sigmoid", "Concat", "Reshape", "Transpose",
              "Gather", "Slice", "Pad", "Resize", "ReduceMean", "BatchNormalization", "AveragePool", "Flatten", "Clip",
              "LeakyRelu", "Exp", "Split", "Where")


def manifest(folder: Path, ops: int) -> Path:
    sys.path.insert(0, str(ROOT))
    from portability.audit import conformance
    from portability.workers.cache import default_root

    lines = []

    def model(path: Path, **kw) -> None:
        lines.append("[[model]]")
        lines.append(f"path = {json.dumps(str(path))}")
        for k, v in kw.items():
            lines.append(f"{k} = {json.dumps(v) if not isinstance(v, dict) else '{' + ', '.join(f'{a} = {json.dumps(b)}' for a, b in v.items()) + '}'}")

    model(FIX / "lenet.onnx", dataset=str(FIX / "digits.npz"), samples=64)
    for name in ("mlp.onnx", "two_outputs.onnx", "int64_ids.onnx", "external/mlp.onnx", "keras_cnn.keras",
                 "keras_cnn.tflite", "keras_cnn_savedmodel", "keras_cnn_tfjs", "torch_cnn.pt2"):
        model(FIX / name)
    model(FIX / "mlp_dynamic.onnx", shapes=["x=2x1x28x28"])
    for p in sorted((default_root() / "study" / "models").glob("*/model.*")):
        if p.suffix in (".onnx", ".keras", ".pt2"):
            model(p)
    cases, _ = conformance.build(default_root() / "onnx-conformance", list(COMMON_OPS[:ops]), "one")
    for c in cases:
        model(c.path, inputs=c.settings["inputs"], expected=str(c.expected), name=c.name, op=c.op,
              tolerance=list(c.tolerance))
    out = folder / "audit.toml"
    out.write_text("\n".join(lines) + "\n")
    return out


def audit(spec: Path, *args: str, kill_after: int | None = None) -> tuple[float, subprocess.CompletedProcess | None, str]:
    cmd = [sys.executable, "-m", "portability", "audit", str(spec), *args]
    t0 = time.perf_counter()
    if kill_after is None:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if p.returncode not in (0, 1):
            sys.exit(f"audit failed ({p.returncode}): {p.stderr[-2000:]}")
        return time.perf_counter() - t0, p, p.stderr
    state = spec.parent / ".portability-audit"
    since = time.time()
    log = spec.parent / "killed.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=f, cwd=ROOT, start_new_session=True)
        while proc.poll() is None and sum(p.stat().st_mtime > since for p in state.glob("*.json")) < kill_after:
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return time.perf_counter() - t0, None, log.read_text()


def comparable(path: Path) -> dict:
    card = json.loads(path.read_text())["scorecard"]
    for t in card["targets"].values():
        t.pop("median_p50_ms", None)
    return card


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="server,web,mobile")
    ap.add_argument("--ops", type=int, default=12)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-whole", type=Path, help="an earlier run's whole-audit JSON (and its state folder beside "
                    "the manifest is not there: the killed run starts fresh anyway): skip step 1")
    ap.add_argument("--skip-ray", action="store_true", help="skip step 3")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="audit-corpus-"))
    try:
        spec = manifest(d, args.ops)
        n = spec.read_text().count("[[model]]")
        t = ["--targets", args.targets]
        if args.skip_whole:
            shutil.copyfile(args.skip_whole, d / "whole.json")
            (spec.parent / ".portability-audit").mkdir()
            whole = None
        else:
            whole, p, _ = audit(spec, *t, "--json", str(d / "whole.json"))
            print(f"{n} models, targets {args.targets}: the whole audit {whole:.0f} s ({whole / n:.1f} s per model)", flush=True)
        shutil.rmtree(spec.parent / ".portability-audit")  # a fresh audit, killed halfway
        killed_s, _, log = audit(spec, *t, kill_after=n // 2)
        finished = log.count(": passed") + log.count(": failed") + log.count(": error")
        resumed_s, p, err = audit(spec, *t, "--json", str(d / "resumed.json"))
        again, checked = err.count("finished earlier"), err.count("checking")
        same = comparable(d / "whole.json") == comparable(d / "resumed.json")
        print(f"killed after {killed_s:.0f} s with {finished} models finished; the rerun took {resumed_s:.0f} s, kept "
              f"{again} finished results and checked {checked}: scorecard {'the same' if same else 'DIFFERENT'}", flush=True)
        same_ray = True
        if not args.skip_ray:
            ray_s, p, _ = audit(spec, *t, "--rerun", "--executor", "ray", "--workers", str(args.workers),
                                "--json", str(d / "ray.json"))
            same_ray = comparable(d / "whole.json") == comparable(d / "ray.json")
            print(f"--executor ray --workers {args.workers}: {ray_s:.0f} s"
                  + (f" ({ray_s / whole:.2f}x the local audit)" if whole else "")
                  + f": scorecard {'the same' if same_ray else 'DIFFERENT'}", flush=True)
        if not (same and same_ray):
            for name in ("resumed.json", "ray.json") if not args.skip_ray else ("resumed.json",):
                a, b = comparable(d / "whole.json"), comparable(d / name)
                diff = [r for r, s in zip(a["rows"], b["rows"]) if r != s]
                print(f"  {name}: {len(diff)} rows differ, e.g. {diff[:2]}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
