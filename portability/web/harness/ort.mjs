// onnxruntime-web: one bundle and exactly one execution provider per page (given a list, ORT falls
// through it silently). The wasm module initialises once per page, so numThreads and wasmPaths are
// set before the first session.
import {webglRenderer, webgpuAdapter} from './device.mjs';

// WebNN: the browser's own ML API. ORT's WebNN provider throws from session creation when the browser has
// no WebNN backend, and a list with wasm after it does not fall back: ask the browser for a context first.
async function webnnContext(deviceType) {
  if (!('ml' in navigator)) throw new Error('WebNN unavailable: navigator.ml is not exposed by this browser');
  try {
    await navigator.ml.createContext({deviceType});
  } catch (e) {
    throw new Error(`WebNN unavailable: createContext({deviceType: '${deviceType}'}) failed: ${e && e.name}: ${e && e.message}`);
  }
  return {api: 'navigator.ml', deviceType};
}

// The models' sessions the WebGPU device in use has served, this one included (null where ORT does not say)
async function deviceSessions(ort) {
  const gpu = ort.env.webgpu ? await ort.env.webgpu.device : null;
  if (!gpu) return null;
  gpu.portabilitySessions = (gpu.portabilitySessions || 0) + 1;
  return gpu.portabilitySessions;
}

export async function create(cfg) {
  const webnn = cfg.ep === 'webnn' ? await webnnContext(cfg.deviceType || 'cpu') : null;
  const dist = cfg.modules + 'onnxruntime-web/dist/';
  const ort = await import(dist + cfg.bundle);
  ort.env.wasm.wasmPaths = dist;
  ort.env.wasm.numThreads = cfg.threads;
  ort.env.wasm.proxy = false;
  ort.env.logLevel = 'warning';
  const provider = webnn ? {name: 'webnn', deviceType: webnn.deviceType} : cfg.ep;
  const options = {executionProviders: [provider], graphOptimizationLevel: cfg.graphOptimization || 'all', logSeverityLevel: 2};
  const runOptions = {logSeverityLevel: 2};
  // Initialise the runtime (wasm compile, GPU device) on a trivial model, so that "init" and
  // "session" are measured apart. ORT's WebGPU context (its GPU device and the programs it compiled) lives
  // while one of its sessions does: there the warm session is kept for the page's life, so that a kept page's
  // next model compiles only the shaders it does not share with earlier ones (a new model of the same shapes
  // compiles none).
  const warm = await ort.InferenceSession.create(cfg.warmModel, options);
  if (cfg.ep !== 'webgpu') await warm.release();
  let session = null;
  let device = null;
  if (cfg.ep === 'webgpu') device = await webgpuAdapter(ort.env.webgpu && ort.env.webgpu.adapter);
  if (cfg.ep === 'webgl') device = webglRenderer();
  if (webnn) device = webnn;

  const info = () => ({
    runtime: 'onnxruntime-web',
    version: ort.env.versions ? ort.env.versions.web : null,
    bundle: cfg.bundle,
    ep: cfg.ep,
    threads: ort.env.wasm.numThreads,
    simd: ort.env.wasm.simd,
    crossOriginIsolated: self.crossOriginIsolated === true,
    device,
    inputs: session ? session.inputNames : null,
    outputs: session ? session.outputNames : null,
  });

  const toOrt = (t) => new ort.Tensor(t.dtype, t.data, t.shape);
  const fromOrt = (t) => ({dtype: t.type, shape: t.dims, data: t.data});

  return {
    info,
    async check(needs) {
      // a float16 model on an adapter without float16 shaders: known before the session is tried (which
      // takes the better part of a second on a software adapter to fail the same way)
      if (needs.shaderF16 && cfg.ep === 'webgpu') {
        const adapter = navigator.gpu && await navigator.gpu.requestAdapter();
        if (adapter && !adapter.features.has('shader-f16')) {
          throw new Error('the model requires f16 but the device does not support it (the WebGPU adapter has no shader-f16 feature)');
        }
      }
    },
    async load(url) {
      // verbose session logging: the wasm core then prints where each node went ("Node placements")
      // on the console, where the driver reads it (the module holds its own console reference).
      session = await ort.InferenceSession.create(url, {...options, logSeverityLevel: 0, logVerbosityLevel: 0});
      if (cfg.ep === 'webgpu' && device) device = {...device, sessions: await deviceSessions(ort)};
    },
    prepare(feeds) {
      const out = {};
      for (const [name, t] of Object.entries(feeds)) out[name] = toOrt(t);
      return out;
    },
    async run(feeds) {
      const res = await session.run(feeds, runOptions);
      const out = {};
      for (const name of session.outputNames) out[name] = fromOrt(res[name]);
      return out;
    },
    // outputs land on the CPU (the default preferredOutputLocation): nothing to release
    step(feeds) {
      return session.run(feeds, runOptions);
    },
    release(feeds) {
      for (const t of Object.values(feeds)) if (t.dispose) t.dispose();
    },
    // Greedy decoding in the page: prefill with the prompt, then one token a step, the cache kept in the
    // engine's own tensors (the step's present.* fed back as past_key_values.*) — never back to Python.
    // spec: {prompt, steps, teacher (or null), names: {ids, mask, positions, cacheBranch, past: [...],
    // presents: [the output returning each past's next value]},
    // pastDims: {name: [heads, headDim]}, int64: [names fed as int64]}. Returns each step's token, its
    // last-position logits and its milliseconds.
    async generate(spec) {
      const n = spec.names;
      const int = (name, values, dims) => (spec.int64.includes(name)
        ? new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), dims)
        : new ort.Tensor('int32', Int32Array.from(values), dims));
      let past = {};
      for (const name of n.past) {
        const [heads, dim] = spec.pastDims[name];
        past[name] = new ort.Tensor('float32', new Float32Array(0), [1, heads, 0, dim]);
      }
      const seq = spec.prompt.slice();
      let fed = spec.prompt.slice();
      const tokens = [], logits = [], stepMs = [];
      for (let i = 0; i < spec.steps; i++) {
        const pastLen = n.past.length ? seq.length - fed.length : 0;
        if (!n.past.length) fed = seq.slice();
        const feeds = {[n.ids]: int(n.ids, fed, [1, fed.length])};
        if (n.mask) feeds[n.mask] = int(n.mask, new Array(pastLen + fed.length).fill(1), [1, pastLen + fed.length]);
        if (n.positions) feeds[n.positions] = int(n.positions, fed.map((_, j) => pastLen + j), [1, fed.length]);
        if (n.cacheBranch) feeds[n.cacheBranch] = new ort.Tensor('bool', new Uint8Array([pastLen > 0 ? 1 : 0]), [1]);
        Object.assign(feeds, past);
        const t0 = performance.now();
        const res = await session.run(feeds, runOptions);
        stepMs.push(performance.now() - t0);
        const out = res.logits;
        const vocab = out.dims[out.dims.length - 1];
        const last = Array.from(out.data.subarray(out.data.length - vocab));
        let tok = 0;
        for (let v = 1; v < vocab; v++) if (last[v] > last[tok]) tok = v;
        tokens.push(tok);
        logits.push(last);
        const next = spec.teacher && i < spec.teacher.length ? spec.teacher[i] : tok;
        seq.push(next);
        fed = [next];
        const kept = {};
        n.past.forEach((name, j) => { kept[name] = res[n.presents[j]]; });
        for (const [name, t] of Object.entries(res)) if (!Object.values(kept).includes(t) && t.dispose) t.dispose();
        past = kept;
      }
      return {tokens, logits, stepMs};
    },
    async close() {
      if (session) await session.release();
      session = null;
    },
  };
}

