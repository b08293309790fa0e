"""Mobile targets: LiteRT (TFLite, four precisions), ONNX Runtime Mobile (ORT format), and both on ARM64
under emulation. Chains are planned from the source (``engine.plan``); from ONNX the TFLite variants
share one onnx2tf run through the cache, from Keras/SavedModel TensorFlow's own converter makes them."""

from portability.converters.onnx_snapshot import SNAPSHOT
from portability.metrics.thresholds import DYNINT8, FP16, INT8  # reduced precision's bounds
from portability.targets.base import Target

#: the ORT-format chain from an ONNX source (what the tests convert with)
ORT_CHAIN = (SNAPSHOT, ("portability.converters.ort_format:OrtFromOnnx", {}))
LITERT = "portability.runtimes.litert:LiteRt"
ARM64_TIMEOUT_S = 900  # qemu runs everything ~250x slower; the emulated interpreter alone starts in seconds

TARGETS = [
    Target(id="mobile/tflite-fp32", runtime=LITERT, variant={"quant": "fp32"}, options={"kernels": "xnnpack"},
           description="LiteRT (XNNPACK, 4 threads) on the float32 .tflite"),
    Target(id="mobile/tflite-fp32-builtin", runtime=LITERT, variant={"quant": "fp32"}, options={"kernels": "builtin"},
           gating=False,
           description="LiteRT's built-in kernels on the same float32 .tflite, no XNNPACK delegate: the kernel A/B of "
           "mobile/tflite-fp32 (when one drifts and the other passes, the report names the delegate; a cross-check)"),
    Target(id="mobile/tflite-fp16", runtime=LITERT, variant={"quant": "fp16"}, thresholds=FP16,
           description="LiteRT on the float16-weights .tflite"),
    Target(id="mobile/tflite-dynint8", runtime=LITERT, variant={"quant": "dynint8"}, thresholds=DYNINT8,
           description="LiteRT on a dynamic-range quantized .tflite (int8 weights, float activations)"),
    Target(id="mobile/tflite-int8", runtime=LITERT, variant={"quant": "int8"}, thresholds=INT8,
           description="LiteRT on a fully int8 .tflite (int8 inputs/outputs), calibrated on the check's inputs"),
    Target(id="mobile/ort-mobile", runtime="portability.runtimes.ort_mobile:OrtMobile", description="ONNX Runtime on the ORT-format model (ORT Mobile's format), with NNAPI/CoreML coverage"),
    Target(id="mobile/executorch-xnnpack", runtime="portability.runtimes.executorch:ExecuTorchRuntime",
           variant={"delegate": "xnnpack"},
           description="ExecuTorch 1.5 (PyTorch's mobile runtime) on the program lowered to its XNNPACK delegate "
           "(PyTorch sources)"),
    Target(id="mobile/executorch-portable", runtime="portability.runtimes.executorch:ExecuTorchRuntime",
           variant={"delegate": "portable"},
           description="ExecuTorch on the program with its portable kernels only (no delegate: the A/B of the "
           "XNNPACK delegate; PyTorch sources)"),
    Target(id="mobile/coreml", runtime="portability.runtimes.coreml:CoreMlConvertOnly", gating=False,
           description="Core ML (iOS): converted by Core ML Tools from a PyTorch program or a SavedModel (ONNX through "
           "onnx2tf's); convert-only — Core ML predicts only on Apple platforms, so it is skipped here, with its "
           "conversion's status, size and op counts"),
    Target(id="mobile/arm64-tflite", runtime="portability.runtimes.arm64:Arm64Tflite", variant={"quant": "fp32"},
           run_timeout_s=ARM64_TIMEOUT_S,
           description="LiteRT's aarch64 build on the float32 .tflite, under qemu-aarch64 emulation (latency emulated)"),
    Target(id="mobile/arm64-ort", runtime="portability.runtimes.arm64:Arm64Ort", run_timeout_s=ARM64_TIMEOUT_S,
           description="ONNX Runtime's aarch64 build on the .ort model, under qemu-aarch64 emulation (latency emulated)"),
]
