"""Web targets: the model really runs in headless Chromium (onnxruntime-web, TensorFlow.js, LiteRT.js).

GPU backends on a machine without a GPU run on a software adapter (SwiftShader); the result says so
(``device: software``). Chains are planned from the source (``engine.plan``): from ONNX, ORT-web fetches
the single-file ONNX snapshot and TF.js / LiteRT.js run what onnx2tf makes of it (SavedModel -> TF.js
graph model; fp32 ``.tflite``); from Keras or a SavedModel, TensorFlow's own converters make them.
"""

from portability.targets.base import Target, quantized

ORT_WEB = "portability.runtimes.ort_web:OrtWeb"
TF_JS = "portability.runtimes.tfjs:Tfjs"
#: the options of the quantized onnxruntime-web targets: wasm on one thread, or WebGPU
WASM_1, WEBGPU = {"ep": "wasm", "threads": 1}, {"ep": "webgpu"}


def _ort(id_: str, description: str, **options) -> Target:
    return Target(id=id_, runtime=ORT_WEB, options=options, description=description)


def _tfjs(backend: str, description: str) -> Target:
    return Target(id=f"web/tfjs-{backend}", runtime=TF_JS,
                  options={"backend": backend}, description=description)


TARGETS = [
    _ort("web/ort-wasm", "onnxruntime-web 1.30, wasm (SIMD), 1 thread (ort.wasm bundle)", ep="wasm", threads=1),
    _ort("web/ort-wasm-mt", "onnxruntime-web, wasm, 2 threads (needs cross-origin isolation; else a fallback)",
         ep="wasm", threads=2),
    _ort("web/ort-webgl", "onnxruntime-web, WebGL (ort.webgl bundle; deprecated upstream, fewer ops)", ep="webgl"),
    _ort("web/ort-webgpu", "onnxruntime-web, WebGPU (ort.webgpu bundle; SwiftShader without a GPU)", ep="webgpu"),
    _ort("web/ort-webnn", "onnxruntime-web, WebNN on the CPU device (ort.all bundle; nodes WebNN lacks fall back to "
         "wasm, reported as a partial fallback; skipped where the browser has no WebNN backend)", ep="webnn", device_type="cpu"),
    quantized("web/ort-wasm-int8", ORT_WEB, "dynint8", "onnxruntime-web, wasm, on ONNX Runtime's dynamic int8 "
              "quantization of the model (what a q8 web deployment ships; a cross-check)", options=WASM_1),
    quantized("web/ort-wasm-qdq", ORT_WEB, "qdq", "onnxruntime-web, wasm, on ONNX Runtime's static int8 QDQ "
              "quantization of the model, calibrated on the check's inputs (a cross-check)", options=WASM_1),
    quantized("web/ort-wasm-fp16", ORT_WEB, "fp16", "onnxruntime-web, wasm, on the float16 model (half the download; "
              "a cross-check)", options=WASM_1),
    quantized("web/ort-webgpu-fp16", ORT_WEB, "fp16", "onnxruntime-web, WebGPU, on the float16 model (what an fp16 "
              "WebGPU deployment ships; SwiftShader without a GPU; a cross-check)", options=WEBGPU),
    quantized("web/ort-wasm-q4", ORT_WEB, "q4", "onnxruntime-web, wasm, on the model with 4-bit weights (MatMulNBits: "
              "what transformers.js ships as q4; skipped for a model with no MatMul of constant weights; a cross-check)",
              options=WASM_1),
    quantized("web/ort-webgpu-int8", ORT_WEB, "dynint8", "onnxruntime-web, WebGPU, on ONNX Runtime's dynamic int8 "
              "quantization of the model (what a q8 WebGPU deployment ships; SwiftShader without a GPU; a cross-check)",
              options=WEBGPU),
    quantized("web/ort-webgpu-q4", ORT_WEB, "q4", "onnxruntime-web, WebGPU, on the model with 4-bit weights "
              "(MatMulNBits, q4; SwiftShader without a GPU; a cross-check)", options=WEBGPU),
    _tfjs("cpu", "TensorFlow.js 4.22 graph model, plain-JS cpu backend"),
    _tfjs("wasm", "TensorFlow.js graph model, wasm backend (1 thread)"),
    _tfjs("webgl", "TensorFlow.js graph model, WebGL backend"),
    _tfjs("webgpu", "TensorFlow.js graph model, WebGPU backend (SwiftShader without a GPU)"),
    Target(id="web/litert-js", runtime="portability.runtimes.litert_js:LiteRtJs",
           variant={"quant": "fp32"}, options={"accelerator": "wasm"},
           description="LiteRT.js 2.5 (@litertjs/core), the fp32 .tflite, wasm (XNNPACK) accelerator"),
]
