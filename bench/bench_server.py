#!/usr/bin/env python3
"""server/ort-cpu (or server/ort-cuda, server/openvino, or mobile/executorch-xnnpack) latency as `portability check` reports it,
against a bare onnxruntime (OpenVINO, ExecuTorch) loop on the same model and inputs, in one run. Rounds
alternate the two so machine noise hits both alike.

    python bench/bench_server.py [MODEL ...] [--rounds 5] [--runs 300] [--target server/openvino]
    python bench/bench_server.py fixtures/torch_cnn.pt2 --target mobile/executorch-xnnpack

Prints per model the median p50 of each side and their ratio (goal: within 5%).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


TARGETS = ("server/ort-cpu", "server/ort-cuda", "server/openvino", "mobile/executorch-xnnpack")


def portability_p50(model: Path, runs: int, warmup: int, target: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        subprocess.run([sys.executable, "-m", "portability", "check", str(model), "--targets", target,
                        "--runs", str(runs), "--warmup", str(warmup), "--samples", "1", "--json", str(out), "-q"],
                       check=True, capture_output=True)
        r = json.loads(out.read_text())
    return next(t for t in r["targets"] if t["id"] == target)["metrics"]["latency_ms"]["p50"]


def feeds_file(model: Path, folder: Path) -> Path:
    """The check's synthesized input (seed 0, uniform [0,1)) as an .npz for the bare loop."""
    from portability.core import inputs as inp
    from portability.sources import load_source_isolated

    info = load_source_isolated(model)  # any source format (an ONNX model, a .pt2)
    shapes, _ = inp.resolve_shapes(info, {})
    path = folder / f"{model.stem}.npz"
    np.savez(path, **inp.synthesize(info, shapes, 1, seed=0).batch(0))
    return path


def _openvino_call(model: Path, feeds: dict):
    """What a user would write for OpenVINO: read, compile for the CPU in float32, one infer request."""
    import openvino as ov

    compiled = ov.Core().compile_model(str(model), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    req = compiled.create_infer_request()
    return lambda: req.infer(feeds)


def _executorch_call(model: Path, feeds: dict):
    """What a user would write for ExecuTorch: lower the program to XNNPACK, load the .pte, execute."""
    import tempfile

    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    prog = to_edge_transform_and_lower(torch.export.load(str(model)), partitioner=[XnnpackPartitioner()]).to_executorch()
    pte = Path(tempfile.mkdtemp()) / "model.pte"
    pte.write_bytes(prog.buffer)
    method = Runtime.get().load_program(str(pte)).load_method("forward")
    args = [torch.from_numpy(v) for v in feeds.values()]
    return lambda: method.execute(args)


def bare_p50(model: Path, feeds_npz: Path, runs: int, warmup: int, target: str = "server/ort-cpu") -> float:
    """What a user would write: a default session, run in a loop (a process that imports numpy and
    onnxruntime only, as lean as the check's worker)."""
    with np.load(feeds_npz, allow_pickle=False) as z:
        feeds = {k: z[k] for k in z.files}
    if target == "server/openvino":
        call = _openvino_call(model, feeds)
    elif target == "mobile/executorch-xnnpack":
        call = _executorch_call(model, feeds)
    else:
        import onnxruntime as ort

        provider = "CUDAExecutionProvider" if target == "server/ort-cuda" else "CPUExecutionProvider"
        if provider == "CUDAExecutionProvider" and hasattr(ort, "preload_dlls"):
            ort.preload_dlls(cuda=True, cudnn=True, msvc=False)  # as onnxruntime-gpu's docs load CUDA, and the check
        sess = ort.InferenceSession(str(model), providers=[provider])
        assert sess.get_providers()[0] == provider, sess.get_providers()
        names = [o.name for o in sess.get_outputs()]  # asked once, as the check's runtime does
        call = lambda: sess.run(names, feeds)  # noqa: E731
    for _ in range(warmup):
        call()
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        ms.append((time.perf_counter() - t0) * 1e3)
    return float(np.percentile(ms, 50))


def bare_in_subprocess(model: Path, feeds_npz: Path, runs: int, warmup: int, target: str) -> float:
    """The bare loop in a fresh process, as portability's worker is (a long-lived process that has
    imported and allocated more times the same loop differently)."""
    p = subprocess.run([sys.executable, __file__, "--bare", str(model), "--feeds", str(feeds_npz), "--runs", str(runs),
                        "--warmup", str(warmup), "--target", target], check=True, capture_output=True, text=True)
    return float(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bare", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--feeds", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("models", nargs="*", type=Path, default=[ROOT / "fixtures" / "lenet.onnx", ROOT / "fixtures" / "mlp.onnx"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--target", choices=TARGETS, default="server/ort-cpu")
    a = ap.parse_args()
    if a.bare:
        print(bare_p50(a.bare, a.feeds, a.runs, a.warmup, a.target))
        return
    print(f"{a.target}: {'model':<22} {'portability p50 ms':>19} {'bare p50 ms':>16} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as d:
        for model in a.models:
            feeds = feeds_file(model, Path(d))
            ours, bare = [], []
            for _ in range(a.rounds):
                ours.append(portability_p50(model, a.runs, a.warmup, a.target))
                bare.append(bare_in_subprocess(model, feeds, a.runs, a.warmup, a.target))
            o, b = statistics.median(ours), statistics.median(bare)
            print(f"{model.name:<22} {o:>19.4f} {b:>16.4f} {o / b:>7.3f}   rounds: "
                  + " ".join(f"{x:.4f}" for x in ours) + " | " + " ".join(f"{x:.4f}" for x in bare), flush=True)


if __name__ == "__main__":
    main()
