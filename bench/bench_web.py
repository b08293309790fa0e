#!/usr/bin/env python3
"""web/ort-wasm latency as portability's runtime reports it, against a bare onnxruntime-web loop in a page
on the same model and input, in one run; plus the web/native ratio (Python onnxruntime, same input).

    python bench/bench_web.py [MODEL ...] [--rounds 5] [--runs 300]

Both sides run in headless Chromium, one page each, one at a time; rounds alternate them so machine
noise hits both alike. Prints per model the median p50 of each side, their ratio (goal: within 5%),
and web/native.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# What a user would write: import the bundle, one session, one tensor, await run() in a loop.
BARE_SETUP = """async ({dist, model, name, dtype, shape, values}) => {
  const ort = await import(dist + 'ort.wasm.min.mjs');
  ort.env.wasm.wasmPaths = dist;
  ort.env.wasm.numThreads = 1;
  const session = await ort.InferenceSession.create(model, {executionProviders: ['wasm']});
  const data = dtype === 'int64' ? BigInt64Array.from(values.map(BigInt))
             : dtype === 'int32' ? Int32Array.from(values) : Float32Array.from(values);
  window.bare = {session, feeds: {[name]: new ort.Tensor(dtype, data, shape)}};
}"""
# The same loop, batched like the harness (same warm-up and batch size) so that both sides are measured
# alike below the page clock's 5 µs resolution.
BARE_LOOP = """async ({warmup, runs, batch}) => {
  const {session, feeds} = window.bare;
  for (let i = 0; i < warmup; i++) await session.run(feeds);
  const ms = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    for (let j = 0; j < batch; j++) await session.run(feeds);
    ms.push((performance.now() - t0) / batch);
  }
  return ms;
}"""


def feeds_for(model: Path) -> dict[str, np.ndarray]:
    from portability.core import inputs as inp
    from portability.core.model import load_model

    info = load_model(model)
    shapes, _ = inp.resolve_shapes(info, {})
    return inp.synthesize(info, shapes, 1, seed=0).batch(0)


class Bare:
    """A bare page: its own server (for the files) and browser, none of the harness code."""

    def __init__(self, model: Path, feeds: dict[str, np.ndarray]):
        from portability.web.browser import Browser
        from portability.web.paths import HARNESS_DIR, modules_dir
        from portability.web.server import HarnessServer

        (name, x), = feeds.items()
        self.server = HarnessServer(HARNESS_DIR, modules_dir(), module_dirs=("onnxruntime-web/dist",)).start()
        self.browser = Browser().start()
        try:
            url = self.server.serve_artifact(model.parent) + model.name
            self.browser.new_page(self.server.base + "h/index.html")
            self.browser.call(BARE_SETUP, {"dist": self.server.base + "m/onnxruntime-web/dist/", "model": url,
                                           "name": name, "dtype": x.dtype.name, "shape": list(x.shape),
                                           "values": x.ravel().tolist()})
        except BaseException:
            self.close()
            raise

    def time(self, warmup: int, runs: int, batch: int) -> list[float]:
        return self.browser.call(BARE_LOOP, {"warmup": warmup, "runs": runs, "batch": batch})

    def close(self) -> None:
        self.browser.close()
        self.server.close()


def native_p50(model: Path, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # like the page's single wasm thread
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    for _ in range(warmup):
        sess.run(None, feeds)
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        ms.append((time.perf_counter() - t0) * 1e3)
    return float(np.percentile(ms, 50))


def bench(model: Path, rounds: int, runs: int, warmup: int) -> dict[str, float]:
    from portability.core.artifact import Artifact
    from portability.runtimes.ort_web import OrtWeb

    feeds = feeds_for(model)
    ours, bare = OrtWeb({"ep": "wasm", "threads": 1}), None
    p_ours, p_bare, p_native = [], [], []
    try:
        ours.load(Artifact(path=model, format="onnx", sha256=""))
        bare = Bare(model, feeds)
        ours.time(feeds, warmup, 5)  # calibrates: the bare loop gets the same warm-up and batch size
        timing = ours.details()["timing"]
        for r in range(rounds):
            sides = [("ours", lambda: ours.time(feeds, warmup, runs)),
                     ("bare", lambda: bare.time(timing["warmup_runs"], runs, timing["batch"]))]
            for side, fn in sides if r % 2 == 0 else sides[::-1]:
                (p_ours if side == "ours" else p_bare).append(float(np.percentile(fn(), 50)))
            p_native.append(native_p50(model, feeds, warmup, runs))
    finally:
        ours.close()
        if bare is not None:
            bare.close()
    o, b, n = statistics.median(p_ours), statistics.median(p_bare), statistics.median(p_native)
    return {"ours": o, "bare": b, "native": n, "ratio": o / b, "web_native": o / n, "batch": timing["batch"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", type=Path,
                    default=sorted(p for p in (ROOT / "fixtures").glob("*.onnx")))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    a = ap.parse_args()
    cols = ("ours p50 ms", 12), ("bare p50 ms", 12), ("ours/bare", 10), ("native ms", 10), ("web/native", 11), ("batch", 6)
    print(f"{'model':<22}" + "".join(f" {c:>{w}}" for c, w in cols))
    worst = 0.0
    for m in a.models:
        r = bench(m, a.rounds, a.runs, a.warmup)
        worst = max(worst, abs(r["ratio"] - 1))
        print(f"{m.name:<22} {r['ours']:>12.4f} {r['bare']:>12.4f} {r['ratio']:>10.3f} {r['native']:>10.4f}"
              f" {r['web_native']:>11.2f} {r['batch']:>6}")
    print(f"worst ours/bare deviation: {worst:.1%} (goal: within 5%)")


if __name__ == "__main__":
    main()
