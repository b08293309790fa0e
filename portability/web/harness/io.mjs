// Tensors between Python and the page: one binary blob per call over the loopback HTTP server
// (GET the feeds Python put, PUT the outputs), never through the driver protocol.

export const ARRAYS = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array,
  int8: Int8Array, int16: Int16Array, int32: Int32Array, int64: BigInt64Array,
  uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, uint64: BigUint64Array,
  bool: Uint8Array,
};

// spec: {url, tensors: [{name, dtype, shape, offset, nbytes}]} -> {name: {dtype, shape, data}}
export async function fetchTensors(spec) {
  return tensorsFrom(await fetchBlob(spec.url), spec.tensors);
}

export async function fetchBlob(url) {
  const resp = await fetch(url);
  if (!resp.ok) throw new Error(`feeds: HTTP ${resp.status} for ${url}`);
  return resp.arrayBuffer();
}

// the tensors one descriptor list names in a fetched blob
export function tensorsFrom(buf, tensors) {
  const out = {};
  for (const t of tensors) {
    const Ctor = ARRAYS[t.dtype];
    if (!Ctor) throw new Error(`input '${t.name}': dtype ${t.dtype} is not supported by the harness`);
    out[t.name] = {dtype: t.dtype, shape: t.shape, data: new Ctor(buf.slice(t.offset, t.offset + t.nbytes))};
  }
  return out;
}

// tensors: {name: {dtype, shape, data}} -> descriptors; the bytes go to `url` in one PUT
export async function putTensors(url, tensors) {
  return (await putBatches(url, [tensors]))[0];
}

// several batches of outputs in one PUT: one descriptor list per batch, offsets into the one body
export async function putBatches(url, batches) {
  const all = [];
  let total = 0;
  for (const tensors of batches) {
    const descs = [];
    for (const [name, t] of Object.entries(tensors)) {
      descs.push({name, dtype: t.dtype, shape: Array.from(t.shape, Number), offset: total, nbytes: t.data.byteLength});
      total += t.data.byteLength;
    }
    all.push(descs);
  }
  const body = new Uint8Array(total);
  all.forEach((descs, i) => {
    for (const d of descs) {
      const t = batches[i][d.name].data;
      body.set(new Uint8Array(t.buffer, t.byteOffset, t.byteLength), d.offset);
    }
  });
  // a function instead of a URL receives the body in the page itself (a bundle served read-only)
  if (typeof url === 'function') {
    await url(body);
    return all;
  }
  const resp = await fetch(url, {method: 'PUT', body});
  if (!resp.ok) throw new Error(`outputs: HTTP ${resp.status}`);
  return all;
}
