// The bundle's driver: runs every target of manifest.json in turn, each in a fresh frame of the harness
// page (h/index.html) with the same steps Python drives (setup, inferMany, time), compares the outputs
// with the reference's in the page, judges each target by the check's own rules (its bounds, and a backend
// other than the one asked for is a fallback), and offers the result (window.bundleResult, result.json).
const here = (rel) => new URL(rel, location.href).href;
const SOFTWARE = /swiftshader|llvmpipe|software|basic render/i;

async function describeDevice() {
  const d = {user_agent: navigator.userAgent, platform: (navigator.userAgentData && navigator.userAgentData.platform) || navigator.platform || '',
             cores: navigator.hardwareConcurrency || null, gpu: null, webgl: null};
  try {
    const adapter = navigator.gpu ? await navigator.gpu.requestAdapter() : null;
    if (adapter) {
      const i = adapter.info || (adapter.requestAdapterInfo ? await adapter.requestAdapterInfo() : {});
      d.gpu = {vendor: i.vendor || '', architecture: i.architecture || '', device: i.device || '', description: i.description || '',
               fallback: Boolean(adapter.isFallbackAdapter || i.isFallbackAdapter)};
    }
  } catch (e) {
    d.gpu_error = String((e && e.message) || e);
  }
  try {
    const gl = document.createElement('canvas').getContext('webgl2') || document.createElement('canvas').getContext('webgl');
    if (gl) {
      const ext = gl.getExtension('WEBGL_debug_renderer_info');
      d.webgl = String(gl.getParameter(ext ? ext.UNMASKED_RENDERER_WEBGL : gl.RENDERER));
    }
  } catch (e) { /* no WebGL: said by its absence */ }
  const desc = d.gpu ? `${d.gpu.vendor} ${d.gpu.architecture} ${d.gpu.description}` : d.webgl || '';
  d.software = Boolean(d.gpu && d.gpu.fallback) || SOFTWARE.test(desc);
  return d;
}

const ARRAYS = {float32: Float32Array, float64: Float64Array, int8: Int8Array, int16: Int16Array, int32: Int32Array,
                int64: BigInt64Array, uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, uint64: BigUint64Array, bool: Uint8Array};

function view(buf, d) {
  const Ctor = ARRAYS[d.dtype];
  if (!Ctor) throw new Error(`output '${d.name}': dtype ${d.dtype} cannot be compared here`);
  return new Ctor(buf.slice(d.offset, d.offset + d.nbytes));
}

// max_abs and cosine of the page's values (every batch, in order) against the reference's
function drift(ref, parts) {
  let i = 0, maxAbs = 0, dot = 0, nr = 0, ng = 0, mismatch = 0;
  for (const g of parts) {
    for (let j = 0; j < g.length; j++, i++) {
      const r = Number(ref[i]), x = Number(g[j]);
      const fr = Number.isFinite(r), fx = Number.isFinite(x);
      if (fr !== fx || (!fr && !(r === x || (Number.isNaN(r) && Number.isNaN(x))))) { mismatch++; continue; }
      if (!fr) continue;
      const d = Math.abs(r - x);
      if (d > maxAbs) maxAbs = d;
      dot += r * x; nr += r * r; ng += x * x;
    }
  }
  if (i !== ref.length) return {problem: `${i} values, reference ${ref.length}`};
  let cosine = nr === 0 && ng === 0 ? 1 : nr === 0 || ng === 0 ? 0 : Math.max(-1, Math.min(1, dot / Math.sqrt(nr * ng)));
  if (mismatch) return {max_abs: 'inf', cosine: 0, nonfinite_mismatch: mismatch};
  return {max_abs: maxAbs, cosine};
}

function judge(outputs, t, problems) {
  const breaches = [...problems];
  for (const [name, m] of Object.entries(outputs)) {
    if (m.nonfinite_mismatch) { breaches.push(`${name}: ${m.nonfinite_mismatch} NaN/Inf values on one side only`); continue; }
    const bound = t.max_abs == null ? null : t.max_abs * Math.max(1, m.ref_max_abs || 0);
    if (bound != null && m.max_abs > bound) breaches.push(`${name}: max_abs ${m.max_abs.toPrecision(3)} > ${bound.toPrecision(3)}`);
    if (t.cosine != null && m.size > 1 && m.cosine < t.cosine) breaches.push(`${name}: cosine ${m.cosine.toFixed(6)} < ${t.cosine}`);
  }
  return breaches;
}

// The check's own rule (engine/verdict.py, reported_breach): an engine whose info names another backend than
// the one asked for ran elsewhere, a fallback. t.accepts: what the target's runtime says that info holds then.
function offBackend(accepts, info) {
  for (const [field, asked] of Object.entries(accepts || {})) {
    const used = info ? info[field] : null;
    if (typeof used === 'string' && used && String(asked) && used !== String(asked)) return `asked for ${asked}, ran on ${used}`;
  }
  return null;
}

async function openFrame() {
  const frame = document.createElement('iframe');
  frame.hidden = true;
  frame.src = here('h/index.html');
  document.body.appendChild(frame);
  const t0 = performance.now();
  while (!(frame.contentWindow && frame.contentWindow.harness)) {
    if (performance.now() - t0 > 60000) throw new Error('the harness page did not load');
    await new Promise((r) => setTimeout(r, 20));
  }
  return frame;
}

async function runTarget(t) {
  const row = {id: t.id, status: 'load-error', error: null, outputs: {}, breaches: [], latency_ms: null, info: null};
  const frame = await openFrame();
  const h = frame.contentWindow.harness;
  try {
    const cfg = {...t.config, engine: t.engine, modules: here('m/'), model: here(t.model)};
    if (cfg.warmModel) cfg.warmModel = here(cfg.warmModel);
    const set = await h.setup(cfg);
    row.info = set.info || null;
    if (!set.ok) { row.error = `${set.stage}: ${set.error}`; return row; }
    row.status = 'run-error';
    let body = null;
    const res = await h.inferMany({url: here(t.feeds.url), batches: t.feeds.batches, out: async (b) => { body = b.buffer; }});
    if (!res.ok) { row.error = `${res.stage}: ${res.error}`; return row; }
    const refBuf = await (await fetch(here(t.reference.url))).arrayBuffer();
    const problems = [];
    const refs = t.reference.outputs;
    for (const [i, d] of refs.entries()) {
      // by name; where the engine names its outputs otherwise (LiteRT.js: by signature key), by position
      const pick = (descs) => descs.find((x) => x.name === d.name) || (descs.length === refs.length ? descs[i] : undefined);
      const parts = res.outputs.map(pick).map((x) => (x ? view(body, x) : null));
      if (parts.some((p) => p === null)) { problems.push(`output '${d.onnx}' is missing`); continue; }
      const m = drift(view(refBuf, d), parts);
      if (m.problem) { problems.push(`output '${d.onnx}' has ${m.problem}`); continue; }
      row.outputs[d.onnx] = {...m, ref_max_abs: d.ref_max_abs, size: d.nbytes / ARRAYS[d.dtype].BYTES_PER_ELEMENT};
    }
    const timed = await h.time({feeds: {url: here(t.feeds.url), tensors: t.feeds.batches[0]}, warmup: t.timing.warmup,
                                runs: t.timing.runs, minWarmupMs: 250, rewarmed: false, minSampleMs: 1});
    if (!timed.ok) { row.error = `${timed.stage}: ${timed.error}`; return row; }
    const ms = [...timed.ms].sort((a, b) => a - b);
    row.latency_ms = {p50: ms.length % 2 ? ms[(ms.length - 1) / 2] : (ms[ms.length / 2 - 1] + ms[ms.length / 2]) / 2, samples: timed.ms};
    row.info = timed.info || row.info;
    row.breaches = judge(row.outputs, t.thresholds, problems);
    const off = offBackend(t.accepts, row.info);
    row.status = off ? 'fallback' : row.breaches.length ? 'drift' : 'pass';
    if (off) row.breaches.unshift(off);
    return row;
  } catch (e) {
    row.error = String((e && e.message) || e);
    return row;
  } finally {
    try { await h.close(); } catch (e) { /* the frame goes anyway */ }
    frame.remove();
  }
}

const fmt = (v, digits) => (typeof v === 'number' ? v.toPrecision(digits) : v == null ? '–' : String(v));

function show(row) {
  const tr = document.createElement('tr');
  const outs = Object.values(row.outputs);
  const worst = outs.length ? outs.reduce((a, m) => (m.max_abs === 'inf' || a === 'inf' ? 'inf' : Math.max(a, m.max_abs)), 0) : null;
  const cos = outs.length ? Math.min(...outs.map((m) => m.cosine)) : null;
  for (const [v, cls] of [[row.id], [row.status, row.status], [fmt(worst, 3)], [fmt(cos, 8)],
                          [fmt(row.latency_ms && row.latency_ms.p50, 4)], [row.error || row.breaches.join('; ')]]) {
    const td = document.createElement('td');
    td.textContent = v;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }
  document.querySelector('#results tbody').appendChild(tr);
}

async function main() {
  const manifest = await (await fetch(here('manifest.json'))).json();
  document.getElementById('model').textContent = `${manifest.model.name} (${manifest.model.sha256.slice(0, 12)})`;
  const device = await describeDevice();
  document.getElementById('device').textContent = `device: ${device.gpu ? `${device.gpu.vendor} ${device.gpu.architecture}`.trim() + ' · ' : ''}${device.user_agent}`;
  const targets = [];
  for (const t of manifest.targets) {
    document.getElementById('state').textContent = `running ${t.id}…`;
    const row = await runTarget(t);
    targets.push(row);
    show(row);
  }
  const result = {kind: manifest.result_kind, version: manifest.version, bundle: manifest.id, model: manifest.model,
                  inputs: manifest.inputs.digest, reference: manifest.reference, created_at: new Date().toISOString(),
                  device, targets};
  const link = document.getElementById('download');
  link.href = URL.createObjectURL(new Blob([JSON.stringify(result, null, 1)], {type: 'application/json'}));
  link.hidden = false;
  document.getElementById('state').textContent = 'done';
  window.bundleResult = result;
}

main().catch((e) => {
  window.bundleError = String((e && e.message) || e);
  document.getElementById('state').textContent = `failed: ${window.bundleError}`;
});
