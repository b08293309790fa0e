#!/usr/bin/env python3
# Runs a portability mobile bundle on this device and writes result.json (``portability ingest result.json``).
#
# Needs Python 3.9+, numpy, device_engines.py beside it (which runs each model) and the runtimes of the
# targets to run (a target whose runtime is not installed is skipped, saying so). On a Raspberry Pi / Jetson /
# other aarch64 Linux board:
#     pip install numpy ai-edge-litert onnxruntime
# On Termux (Android): pkg install python python-numpy, then pip install ai-edge-litert onnxruntime
# where wheels exist for it. Then, in this folder:
#     python3 run.py            (options: --out FILE, --runs N, --threads N)
"""A portability mobile bundle's runner: every target of ``manifest.json`` whose runtime is installed runs
its model on the bundle's inputs, is compared with the reference's outputs (max_abs and cosine per
output, the check's bounds) and timed; ``result.json`` names the device and holds one row per target."""
import argparse
import json
import math
import os
import platform
import re
import sys
from datetime import datetime, timezone

import numpy as np

from device_engines import ENGINES, Missing, timed_runs  # beside this script in the bundle

MANIFEST = "manifest.json"
PASS = "pass"
DRIFT = "drift"
LOAD_ERROR = "load-error"
RUN_ERROR = "run-error"
#: ARM cores by (implementer, part) as /proc/cpuinfo gives them
ARM_CORES = {("0x41", "0xd03"): "Cortex-A53", ("0x41", "0xd04"): "Cortex-A35", ("0x41", "0xd05"): "Cortex-A55",
             ("0x41", "0xd07"): "Cortex-A57", ("0x41", "0xd08"): "Cortex-A72", ("0x41", "0xd09"): "Cortex-A73",
             ("0x41", "0xd0a"): "Cortex-A75", ("0x41", "0xd0b"): "Cortex-A76", ("0x41", "0xd0c"): "Neoverse-N1",
             ("0x41", "0xd0d"): "Cortex-A77", ("0x41", "0xd40"): "Neoverse-V1", ("0x41", "0xd41"): "Cortex-A78",
             ("0x41", "0xd42"): "Cortex-A78AE", ("0x41", "0xd44"): "Cortex-X1", ("0x41", "0xd46"): "Cortex-A510",
             ("0x41", "0xd47"): "Cortex-A710", ("0x41", "0xd48"): "Cortex-X2", ("0x41", "0xd4f"): "Neoverse-V2",
             ("0x4e", "0x004"): "NVIDIA Carmel", ("0x61", "0x022"): "Apple M1"}


def cpu_model():
    """(core, board) from /proc/cpuinfo where present: the x86 model name or the ARM core, and the board."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None, None
    field = lambda k: (re.findall(r"^" + k + r"\s*:\s*(.+?)\s*$", text, re.M) or [None])[0]  # noqa: E731
    core = field("model name")
    parts = sorted({(field("CPU implementer"), p) for p in re.findall(r"^CPU part\s*:\s*(\S+)", text, re.M)})
    if parts and (core is None or core.startswith("ARMv")):
        core = " + ".join(ARM_CORES.get(p, f"ARM {p[0]}:{p[1]}") for p in parts)
    return core, field("Model") or field("Hardware")


def device():
    core, board = cpu_model()
    return {"machine": platform.machine(), "platform": platform.platform(), "cpu": core, "board": board,
            "cores": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__}


def drift(ref, got):
    """max_abs and cosine of ``got`` against ``ref`` (flat float64); NaN/Inf on one side only: a mismatch."""
    fr, fg = np.isfinite(ref), np.isfinite(got)
    same = (ref == got) | (np.isnan(ref) & np.isnan(got))
    mismatch = int(np.count_nonzero((fr != fg) | (~fr & ~fg & ~same)))
    if mismatch:
        return {"max_abs": "inf", "cosine": 0.0, "nonfinite_mismatch": mismatch}
    r, g = ref[fr], got[fr]
    nr, ng = float(r @ r), float(g @ g)
    cosine = 1.0 if nr == 0 and ng == 0 else 0.0 if nr == 0 or ng == 0 else float(r @ g) / math.sqrt(nr * ng)
    return {"max_abs": float(np.abs(r - g).max()) if r.size else 0.0, "cosine": max(-1.0, min(1.0, cosine))}


def judge(outputs, t):
    """The thresholds' breaches: max_abs over ``max_abs * max(1, max|reference|)``, cosine under its bound."""
    out = []
    for name, m in outputs.items():
        if m.get("nonfinite_mismatch"):
            out.append(f"{name}: {m['nonfinite_mismatch']} NaN/Inf values on one side only")
            continue
        bound = None if t.get("max_abs") is None else t["max_abs"] * max(1.0, m["ref_max_abs"])
        if bound is not None and m["max_abs"] > bound:
            out.append(f"{name}: max_abs {m['max_abs']:.3g} > {bound:.3g}")
        if t.get("cosine") is not None and m["size"] > 1 and m["cosine"] < t["cosine"]:
            out.append(f"{name}: cosine {m['cosine']:.6f} < {t['cosine']}")
    return out


def outputs_of(model, t, data):
    """Every batch's outputs (calls concatenated, dequantized) against the reference: per output drift."""
    got = {o["onnx"]: [] for o in t["outputs"]}
    for calls in t["calls"]:
        parts = [model.run([data[k] for k in keys]) for keys in calls]
        for j, o in enumerate(t["outputs"]):
            y = np.concatenate([p[j] for p in parts]) if len(parts) > 1 else np.asarray(parts[0][j])
            if o.get("quant"):
                y = (y.astype(np.float32) - o["quant"]["zero_point"]) * np.float32(o["quant"]["scale"])
            got[o["onnx"]].append(y)
    out, problems = {}, []
    for o in t["outputs"]:
        refs = [data[k] for k in o["ref"]]
        if any(np.size(g) != np.size(r) for g, r in zip(got[o["onnx"]], refs)):
            problems.append(f"output '{o['onnx']}' has another number of values than the reference")
            continue
        flat = lambda xs: np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1) for x in xs])  # noqa: E731
        out[o["onnx"]] = {**drift(flat(refs), flat(got[o["onnx"]])), "ref_max_abs": o["ref_max_abs"], "size": o["size"]}
    return out, problems


def timed(model, t, data, runs):
    ms = timed_runs(model.run, [data[k] for k in t["calls"][0][0]], t["timing"]["warmup"], runs or t["timing"]["runs"])
    s, n = sorted(ms), len(ms)
    return {"p50": s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2, "samples": ms}


def run_target(t, args):
    """One target's result row; Missing when its runtime is not installed."""
    row = {"id": t["id"], "status": LOAD_ERROR, "error": None, "outputs": {}, "breaches": [], "latency_ms": None, "info": None}
    threads = args.threads or t.get("threads") or max(1, min(4, os.cpu_count() or 1))
    engine = ENGINES[t["runtime"]]
    try:
        model = engine(t["model"], threads, [e[engine.handle] for e in t["inputs"]],
                       [e[engine.handle] for e in t["outputs"]], t.get("kernels"), os.path.splitext(t["model"])[1][1:])
    except Missing:
        raise
    except Exception as e:  # noqa: BLE001 - the runtime's own error, reported
        row["error"] = f"{type(e).__name__}: {e}"[:2000]
        return row
    row["info"], row["status"] = model.info, RUN_ERROR
    try:
        with np.load(t["data"], allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        row["outputs"], problems = outputs_of(model, t, data)
        row["latency_ms"] = timed(model, t, data, args.runs)
    except Exception as e:  # noqa: BLE001 - the runtime's own error, reported
        row["error"], row["outputs"] = f"{type(e).__name__}: {e}"[:2000], {}
        return row
    row["breaches"] = problems + judge(row["outputs"], t["thresholds"])
    row["status"] = DRIFT if row["breaches"] else PASS
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description="Run this bundle's mobile targets here and write result.json.")
    ap.add_argument("--out", default="result.json", help="the result file (default: result.json)")
    ap.add_argument("--runs", type=int, default=0, help="timed runs per target (default: the manifest's)")
    ap.add_argument("--threads", type=int, default=0, help="threads per runtime (default: the target's, else up to 4)")
    args = ap.parse_args(argv)
    with open(MANIFEST) as f:
        manifest = json.load(f)
    dev, rows, skipped = device(), [], []
    print(f"device: {dev['machine']} · {dev['cpu'] or '?'}{' · ' + dev['board'] if dev['board'] else ''} · {dev['platform']}")
    for t in manifest["targets"]:
        try:
            row = run_target(t, args)
        except Missing as e:
            skipped.append({"id": t["id"], "why": str(e)})
            print(f"  skipped    {t['id']}: {e}")
            continue
        rows.append(row)
        worst = min((m["cosine"] for m in row["outputs"].values()), default=None)
        p50 = (row["latency_ms"] or {}).get("p50")
        print(f"  {row['status']:<10} {t['id']}" + (f"  p50 {p50:.3f} ms" if p50 is not None else "")
              + (f"  cosine {worst:.6f}" if worst is not None else "") + f"  {row['error'] or '; '.join(row['breaches'])}")
    if not rows:
        print("no target could run here: no result written", file=sys.stderr)
        return 1
    result = {"kind": manifest["result_kind"], "version": manifest["version"], "bundle": manifest["id"],
              "model": manifest["model"], "inputs": manifest["inputs"]["digest"], "reference": manifest["reference"],
              "created_at": datetime.now(timezone.utc).isoformat(), "device": dev, "targets": rows, "skipped": skipped}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
