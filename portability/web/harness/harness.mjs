// The page side of a web run. Python drives it through page.evaluate("harness.<step>(arg)");
// every step resolves to {ok: true, ...} or {ok: false, stage, error} (never a rejected promise),
// and every duration is measured here with performance.now().
import {fetchBlob, fetchTensors, putBatches, putTensors, tensorsFrom} from './io.mjs';

// the engine's page module: harness/<engine>.mjs (the name comes from the runtime's descriptor)
const engineModule = (name) => {
  if (!/^[a-z][a-z0-9_-]*$/.test(name)) throw new Error(`bad engine name ${JSON.stringify(name)}`);
  return `./${name}.mjs`;
};
let engine = null;
let prepared = null;

function failure(stage, e, info) {
  const error = (e && (e.message || String(e))) || 'unknown error';
  return {ok: false, stage, error, stack: e && e.stack ? String(e.stack).slice(0, 2000) : null, info};
}

async function guard(stage, fn) {
  try {
    return {ok: true, ...(await fn())};
  } catch (e) {
    return failure(stage, e, engine ? engine.info() : null);
  }
}

async function setup(cfg) {
  let stage = 'init';
  try {
    const {create} = await import(engineModule(cfg.engine));
    const t0 = performance.now();
    engine = await create(cfg);
    const t1 = performance.now();
    stage = 'session';
    await engine.load(cfg.model);
    const t2 = performance.now();
    return {ok: true, timings: {init: t1 - t0, session: t2 - t1}, info: engine.info()};
  } catch (e) {
    return failure(stage, e, engine ? engine.info() : null);
  }
}

async function infer(spec) {
  return guard('run', async () => {
    const feeds = await fetchTensors(spec.feeds);
    const inputs = engine.prepare(feeds);
    try {
      const t0 = performance.now();
      const outputs = await engine.run(inputs);
      const ms = performance.now() - t0;
      return {ms, outputs: await putTensors(spec.out, outputs), info: engine.info()};
    } finally {
      engine.release(inputs);
    }
  });
}

// Many batches in one call (a labelled dataset): one blob in, one blob out, one run per batch.
async function inferMany(spec) {
  return guard('run', async () => {
    const buf = await fetchBlob(spec.url);
    const results = [];
    for (const tensors of spec.batches) {
      const inputs = engine.prepare(tensorsFrom(buf, tensors));
      try {
        results.push(await engine.run(inputs));
      } finally {
        engine.release(inputs);
      }
    }
    return {outputs: await putBatches(spec.out, results), info: engine.info()};
  });
}

// Steady state: the feeds are fetched and prepared once, then runs are timed alone (including reading
// the outputs back to the CPU, as an application would). The warm-up lasts at least minWarmupMs (the JS
// glue around wasm is JIT-compiled over the first thousands of fast runs). performance.now() ticks in
// 5 µs steps in an isolated page: when one run is shorter than minSampleMs, each sample is the mean of
// `batch` consecutive runs, so that sub-millisecond models are measured, not quantized.
const CALIBRATION_RUNS = 20;

// The time-based part is for fast runs only: a run of SLOW_RUN_MS or more (a software GPU adapter's) has
// no thousands of runs ahead to JIT-compile, and its count (spec.warmup) suffices.
const SLOW_RUN_MS = 25;

async function warmUp(spec) {
  const w0 = performance.now();
  let warm = 0;
  while (warm < spec.warmup
         || (performance.now() - w0 < spec.minWarmupMs && (warm === 0 || (performance.now() - w0) / warm < SLOW_RUN_MS))) {
    await engine.step(prepared);
    warm++;
  }
  return {runs: warm, perRunMs: warm ? (performance.now() - w0) / warm : Infinity};
}

// The warm-up alone, before the target's turn to time (while other targets work): time() then only
// re-warms briefly. Returns the runs done.
async function warm(spec) {
  return guard('time', async () => {
    const feeds = await fetchTensors(spec.feeds);
    prepared = engine.prepare(feeds);
    try {
      return {runs: (await warmUp(spec)).runs};
    } finally {
      engine.release(prepared);
      prepared = null;
    }
  });
}

async function time(spec) {
  return guard('time', async () => {
    const feeds = await fetchTensors(spec.feeds);
    prepared = engine.prepare(feeds);
    try {
      const {runs: warm, perRunMs} = await warmUp(spec);
      // calibration: enough runs to tell whether one run is shorter than minSampleMs, no more (one run of
      // a slow engine, such as a software GPU adapter, already says: one sample per run). A page warmed up
      // before (spec.rewarmed) is in its steady state already: the re-warm's own runs tell.
      let per = perRunMs, calibration = 0;
      if (!spec.rewarmed || !Number.isFinite(perRunMs)) {
        const c0 = performance.now();
        while (calibration < CALIBRATION_RUNS
               && (calibration < 1 || performance.now() - c0 < CALIBRATION_RUNS * spec.minSampleMs)) {
          await engine.step(prepared);
          calibration++;
        }
        per = (performance.now() - c0) / calibration;
      }
      const batch = Math.max(1, Math.min(1000, Math.ceil(spec.minSampleMs / Math.max(per, 1e-3))));
      const ms = [];
      for (let i = 0; i < spec.runs; i++) {
        const t0 = performance.now();
        for (let j = 0; j < batch; j++) await engine.step(prepared);
        ms.push((performance.now() - t0) / batch);
      }
      return {ms, timing: {batch, warmup_runs: warm + calibration}, info: engine.info()};
    } finally {
      engine.release(prepared);
      prepared = null;
    }
  });
}

async function close() {
  return guard('close', async () => {
    if (engine && engine.close) await engine.close();
    engine = null;
    return {};
  });
}

window.harness = {setup, infer, inferMany, warm, time, close, isolated: () => self.crossOriginIsolated === true};
