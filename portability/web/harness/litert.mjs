// LiteRT.js (@litertjs/core): a .tflite model on the wasm (XNNPACK) or webgpu accelerator.
// Tensors are keyed by the model's own tensor names, in and out.
import {loadAndCompile, loadLiteRt, Tensor} from '@litertjs/core';
import {webgpuAdapter} from './device.mjs';

export async function create(cfg) {
  const wasmDir = cfg.modules + '@litertjs/core/wasm/';
  await loadLiteRt(wasmDir, {threads: cfg.threads > 1, jspi: false});
  const device = cfg.accelerator === 'webgpu' ? await webgpuAdapter(null) : null;
  let model = null;
  let inputs = null;
  let outputs = null;

  const info = () => ({
    runtime: 'litert.js',
    version: cfg.version,
    accelerator: model && model.options ? model.options.accelerator : cfg.accelerator,
    // whether every op runs on the accelerator (false: some fell back to the wasm CPU kernels)
    fullyAccelerated: model && typeof model.isFullyAccelerated === 'boolean' ? model.isFullyAccelerated : null,
    wasm: cfg.threads > 1 ? 'litert_wasm_threaded_internal' : 'litert_wasm_internal',
    crossOriginIsolated: self.crossOriginIsolated === true,
    device,
    inputs: inputs && inputs.map((d) => ({name: d.name, dtype: d.dtype, shape: Array.from(d.shape)})),
    outputs: outputs && outputs.map((d) => ({name: d.name, dtype: d.dtype, shape: Array.from(d.shape)})),
  });

  async function execute(tensors) {
    const res = await model.run(tensors);
    return Array.isArray(res) ? res : outputs.map((d) => res[d.name]);
  }

  return {
    info,
    async load(url) {
      model = await loadAndCompile(url, {accelerator: cfg.accelerator});
      inputs = model.getInputDetails();
      outputs = model.getOutputDetails();
    },
    prepare(feeds) {
      // LiteRT.js may name a tensor without its ':0' or its 'serving_default_' prefix, and order the inputs
      // its own way: matched by name first, by position only for an input no feed names
      const plain = (n) => String(n).replace(/:\d+$/, '').replace(/^serving_default_/, '');
      const byName = Object.fromEntries(Object.entries(feeds).map(([k, v]) => [plain(k), v]));
      return inputs.map((d, i) => {
        const t = feeds[d.name] || byName[plain(d.name)] || Object.values(feeds)[i];
        if (!t) throw new Error(`no feed for the model input '${d.name}'`);
        return new Tensor(t.data, t.shape);
      });
    },
    async run(tensors) {
      const res = await execute(tensors);
      const out = {};
      for (let i = 0; i < res.length; i++) {
        const cpu = res[i].accelerator === 'wasm' ? res[i] : await res[i].moveTo('wasm');
        const data = cpu.toTypedArray().slice();
        out[outputs[i].name] = {dtype: cpu.type.dtype, shape: Array.from(cpu.type.layout.dimensions), data};
        cpu.delete();
      }
      return out;
    },
    async step(tensors) {
      const res = await execute(tensors);
      for (const t of res) {
        const cpu = t.accelerator === 'wasm' ? t : await t.moveTo('wasm');
        cpu.toTypedArray();
        cpu.delete();
      }
    },
    release(tensors) {
      tensors.forEach((t) => t.delete());
    },
    async close() {
      if (model && model.delete) model.delete();
      model = null;
    },
  };
}
