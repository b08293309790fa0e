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
  const resp = await fetch(spec.url);
  if (!resp.ok) throw new Error(`feeds: HTTP ${resp.status} for ${spec.url}`);
  const buf = await resp.arrayBuffer();
  const out = {};
  for (const t of spec.tensors) {
    const Ctor = ARRAYS[t.dtype];
    if (!Ctor) throw new Error(`input '${t.name}': dtype ${t.dtype} is not supported by the harness`);
    out[t.name] = {dtype: t.dtype, shape: t.shape, data: new Ctor(buf.slice(t.offset, t.offset + t.nbytes))};
  }
  return out;
}

// tensors: {name: {dtype, shape, data}} -> descriptors; the bytes go to `url` in one PUT
export async function putTensors(url, tensors) {
  const descs = [];
  let total = 0;
  for (const [name, t] of Object.entries(tensors)) {
    descs.push({name, dtype: t.dtype, shape: Array.from(t.shape, Number), offset: total, nbytes: t.data.byteLength});
    total += t.data.byteLength;
  }
  const body = new Uint8Array(total);
  for (const d of descs) {
    const t = tensors[d.name].data;
    body.set(new Uint8Array(t.buffer, t.byteOffset, t.byteLength), d.offset);
  }
  const resp = await fetch(url, {method: 'PUT', body});
  if (!resp.ok) throw new Error(`outputs: HTTP ${resp.status}`);
  return descs;
}
