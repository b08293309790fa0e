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

// A fresh page: the engine, then the model.
async function setup(cfg) {
  const init = await start(cfg);
  if (!init.ok) return init;
  const loaded = await load({model: cfg.model, needs: cfg.needs});
  if (!loaded.ok) return loaded;
  return {ok: true, timings: {...init.timings, ...loaded.timings}, info: loaded.info};
}

// The engine alone (a page kept warm for the next model of the same configuration: web/pool.py).
async function start(cfg) {
  try {
    const {create} = await import(engineModule(cfg.engine));
    const t0 = performance.now();
    engine = await create(cfg);
    return {ok: true, timings: {init: performance.now() - t0}, info: engine.info()};
  } catch (e) {
    return failure('init', e, engine ? engine.info() : null);
  }
}

// A model on the started engine, in place of the one before (whose session is released first). What the
// model asks of the device is checked before: a model this device cannot run leaves the page's session as it was.
async function load(spec) {
  try {
    if (engine.check) await engine.check(spec.needs || {});
    if (current && engine.close) await engine.close();
    current = null;
    const t0 = performance.now();
    await engine.load(spec.model, spec.needs || {});
    current = {digest: spec.digest || null, facts: null};
    return {ok: true, timings: {session: performance.now() - t0}, info: engine.info()};
  } catch (e) {
    return failure('session', e, engine ? engine.info() : null);
  }
}

// A kept page serves one driver at a time: the first claim wins until park() gives the page back. The
// page's address names the driver that opened it (#owner=...): only that one may claim it first.
let owner = new URLSearchParams(location.hash.slice(1)).get('owner');
let current = null;
let uses = 0;

function claim(token) {
  if (owner !== null && owner !== token) return {ok: false};
  owner = token;
  uses++;
  return {ok: true, started: engine !== null, current, uses};
}

function state() {
  return {ok: true, info: engine ? engine.info() : null, current, uses};
}

// Back to the pool, keeping the loaded model (and what the driver learnt of it) for its next claim.
function park(facts, check) {
  if (current && facts) current.facts = facts;
  owner = null;
  // the page's address says what it holds (and for which check), so that a driver finds the page of its model
  // without asking
  const k = new URLSearchParams(location.hash.slice(1)).get('k');
  const held = current && current.digest ? `&d=${current.digest}` + (check ? `&c=${encodeURIComponent(check)}` : '') : '';
  history.replaceState(null, '', `#k=${k}` + held);
  return {ok: true};
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
// re-warms briefly. Returns the runs done and what one took.
async function warm(spec) {
  return guard('time', async () => {
    const feeds = await fetchTensors(spec.feeds);
    prepared = engine.prepare(feeds);
    try {
      const {runs, perRunMs} = await warmUp(spec);
      return {runs, perRunMs: Number.isFinite(perRunMs) ? perRunMs : null};
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
      // before (spec.rewarmed) is in its steady state already: the re-warm's own runs tell, or (a run that
      // outlasts the re-warm: none) the warm-up's (spec.perRunMs).
      let per = Number.isFinite(perRunMs) ? perRunMs : (spec.perRunMs || Infinity), calibration = 0;
      if (!spec.batch && (!spec.rewarmed || !Number.isFinite(per))) {
        const c0 = performance.now();
        while (calibration < CALIBRATION_RUNS
               && (calibration < 1 || performance.now() - c0 < CALIBRATION_RUNS * spec.minSampleMs)) {
          await engine.step(prepared);
          calibration++;
        }
        per = (performance.now() - c0) / calibration;
      }
      // a later chunk of one timing: the runs per sample of its first chunk
      const batch = spec.batch || Math.max(1, Math.min(1000, Math.ceil(spec.minSampleMs / Math.max(per, 1e-3))));
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

// Greedy decoding with the cache, the loop in the page (an engine that has one: its ``generate``).
async function generate(spec) {
  return guard('run', async () => {
    if (!engine.generate) throw new Error('this engine has no generation loop in the page');
    return {...await engine.generate(spec), info: engine.info()};
  });
}

async function close() {
  return guard('close', async () => {
    if (engine && engine.close) await engine.close();
    engine = null;
    current = null;
    return {};
  });
}

window.harness = {setup, start, load, claim, park, state, infer, inferMany, warm, time, generate, close, isolated: () => self.crossOriginIsolated === true};
