// TensorFlow.js: a graph model on one backend. setBackend() resolves false (and TF.js stays on
// another backend) when the requested one cannot start, so the backend reported is tf.getBackend().
import {webglRenderer, webgpuAdapter} from './device.mjs';

const SCRIPTS = {
  core: '@tensorflow/tfjs/dist/tf.min.js',
  wasm: '@tensorflow/tfjs-backend-wasm/dist/tf-backend-wasm.min.js',
  webgpu: '@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js',
};

function loadScript(url) {
  return new Promise((resolve, reject) => {
    const s = document.createElement('script');
    s.src = url;
    s.onload = resolve;
    s.onerror = () => reject(new Error(`could not load ${url}`));
    document.head.appendChild(s);
  });
}

export async function create(cfg) {
  const bundles = [SCRIPTS.core].concat(SCRIPTS[cfg.backend] ? [SCRIPTS[cfg.backend]] : []);
  for (const b of bundles) await loadScript(cfg.modules + b);
  const tf = self.tf;
  if (cfg.backend === 'wasm') {
    tf.wasm.setWasmPaths(cfg.modules + '@tensorflow/tfjs-backend-wasm/dist/');
    if (tf.wasm.setThreadsCount) tf.wasm.setThreadsCount(cfg.threads);
  }
  const accepted = await tf.setBackend(cfg.backend);
  await tf.ready();
  const backend = tf.getBackend();
  let device = null;
  if (backend === 'webgl') device = webglRenderer(tf.backend().gpgpu && tf.backend().gpgpu.gl);
  if (backend === 'webgpu') device = await webgpuAdapter(null);
  let model = null;
  let useAsync = false;
  let outputNames = null;

  const info = () => ({
    runtime: 'tfjs',
    version: tf.version.tfjs,
    bundles,
    backend: tf.getBackend(),
    backend_accepted: accepted,
    wasm_simd: backend === 'wasm' ? tf.env().getBool('WASM_HAS_SIMD_SUPPORT') : undefined,
    wasm_threads: backend === 'wasm' && tf.wasm.getThreadsCount ? tf.wasm.getThreadsCount() : undefined,
    crossOriginIsolated: self.crossOriginIsolated === true,
    device,
    execute: useAsync ? 'executeAsync' : 'execute',
  });

  // -> {signature key: tf.Tensor}
  async function execute(inputs) {
    let out;
    if (!useAsync) {
      try {
        out = model.execute(inputs, outputNames);
      } catch (e) {
        if (!/executeAsync/.test(String(e && e.message))) throw e;
        useAsync = true;  // dynamic ops (control flow): only the async executor runs them
      }
    }
    if (useAsync) out = await model.executeAsync(inputs, outputNames);
    if (out instanceof tf.Tensor) out = [out];
    if (!Array.isArray(out)) out = Object.values(out);  // keyed by the structured keys, in the order asked
    return Object.fromEntries(out.map((t, i) => [outputNames[i], t]));
  }

  return {
    info,
    async load(url) {
      model = await tf.loadGraphModel(url);
      // every output asked for by its graph node and keyed by it: the converter's structured keys (output_0...)
      // can be assigned to the nodes in another order than the SavedModel's (seen on a five-output GPT-2)
      const plain = (n) => String(n).replace(/:\d+$/, '');
      const sig = model.signature && model.signature.outputs;
      outputNames = sig ? Object.values(sig).map((v) => plain(v.name)) : model.outputNodes.map(plain);
    },
    prepare(feeds) {
      const out = {};
      for (const [key, t] of Object.entries(feeds)) out[key] = tf.tensor(t.data, t.shape, t.dtype);
      return out;
    },
    async run(inputs) {
      const res = await execute(inputs);
      const out = {};
      for (const [key, t] of Object.entries(res)) {
        out[key] = {dtype: t.dtype, shape: t.shape, data: await t.data()};
        t.dispose();
      }
      return out;
    },
    async step(inputs) {
      const res = Object.values(await execute(inputs));
      await Promise.all(res.map((t) => t.data()));
      res.forEach((t) => t.dispose());
    },
    release(inputs) {
      Object.values(inputs).forEach((t) => t.dispose());
    },
    async close() {
      if (model) model.dispose();
      model = null;
    },
  };
}
