// What the GPU-ish backends really run on: a hardware GPU or a software adapter (SwiftShader).

const SOFTWARE = /swiftshader|llvmpipe|software|basic render/i;

export async function webgpuAdapter(adapter) {
  if (!adapter && navigator.gpu) adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return null;
  const i = adapter.info || (adapter.requestAdapterInfo ? await adapter.requestAdapterInfo() : {});
  const desc = [i.vendor, i.architecture, i.device, i.description].filter(Boolean).join(' ');
  const fallback = Boolean(adapter.isFallbackAdapter || i.isFallbackAdapter);
  return {api: 'webgpu', adapter: desc, device: fallback || SOFTWARE.test(desc) ? 'software' : 'gpu'};
}

export function webglRenderer(gl) {
  if (!gl) gl = document.createElement('canvas').getContext('webgl2') || document.createElement('canvas').getContext('webgl');
  if (!gl) return null;
  const ext = gl.getExtension('WEBGL_debug_renderer_info');
  const desc = String(gl.getParameter(ext ? ext.UNMASKED_RENDERER_WEBGL : gl.RENDERER));
  return {api: 'webgl', adapter: desc, device: SOFTWARE.test(desc) ? 'software' : 'gpu'};
}
