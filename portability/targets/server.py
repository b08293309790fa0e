"""Server targets: ONNX Runtime and the ONNX reference evaluator (on the ONNX model), TensorFlow on a
SavedModel, Keras 3 and eager PyTorch (the references of Keras and torch.export sources)."""
from portability.metrics.thresholds import BF16
from portability.targets.base import Target, quantized

ORT_CPU = "portability.runtimes.ort:OrtCpu"


TARGETS = [
    Target(
        id="server/ort-cpu",
        runtime="portability.runtimes.ort:OrtCpu",
        description="ONNX Runtime, CPU execution provider, all graph optimizations (the reference)",
    ),
    Target(
        id="server/ort-cpu-noopt",
        runtime="portability.runtimes.ort:OrtCpu",
        options={"graph_optimization": "disabled"},
        description="ONNX Runtime, CPU, graph optimizations disabled (catches optimizer bugs)",
    ),
    Target(
        id="server/ort-cpu-1thread",
        runtime="portability.runtimes.ort:OrtCpu",
        options={"threads": 1},
        description="ONNX Runtime, CPU, one intra-op thread (a phone's or a serverless function's share: "
        "the latency one core gives, and kernels that split work differently)",
    ),
    quantized("server/ort-int8", ORT_CPU, "dynint8",
              "ONNX Runtime, CPU, on the model with ONNX Runtime's dynamic int8 quantization "
              "(int8 weights, activations quantized per inference): an int8 ONNX deployment (a cross-check)"),
    quantized("server/ort-qdq", ORT_CPU, "qdq",
              "ONNX Runtime, CPU, on the model with ONNX Runtime's static int8 quantization in the QDQ format, "
              "calibrated on the check's inputs (int8 weights and activations; a cross-check)"),
    quantized("server/ort-fp16", ORT_CPU, "fp16",
              "ONNX Runtime, CPU, on the model converted to float16 (float32 inputs and outputs kept; a cross-check)"),
    quantized("server/ort-q4", ORT_CPU, "q4",
              "ONNX Runtime, CPU, on the model with 4-bit weights (each MatMul with a constant weight as "
              "MatMulNBits; what a q4 deployment ships; skipped for a model with no such MatMul; a cross-check)"),
    Target(
        id="server/openvino",
        runtime="portability.runtimes.openvino:OpenVinoCpu",
        description="OpenVINO 2026.4, CPU, float32 inference precision: reads the ONNX model (or a .tflite source) "
        "with its own frontend",
    ),
    Target(
        id="server/openvino-default",
        runtime="portability.runtimes.openvino:OpenVinoCpu",
        options={"precision": "default"},
        thresholds=BF16,  # bf16 where the CPU has it; float32 elsewhere (the details say which ran)
        gating=False,
        description="OpenVINO, CPU, its default inference precision for this CPU (bfloat16 where the CPU has "
        "AMX or AVX-512 BF16: what an unconfigured deployment runs; a cross-check)",
    ),
    Target(
        id="server/onnx-reference",
        runtime="portability.runtimes.onnx_reference:OnnxReference",
        gating=False,
        run_timeout_s=600,
        time_budget_s=2.0,  # its latency is no platform's: a slow model is not timed at all (min_runs 0)
        min_runs=0,
        sample_budget_s=20.0,  # a slow model compares the batches that fit 20 s (the report says how many)
        description="onnx.reference evaluator: an independent, slow implementation of the spec "
        "(a cross-check: it has known wrong kernels)",
    ),
    Target(
        id="server/tf",
        runtime="portability.runtimes.tf_savedmodel:TfSavedModel",
        description="TensorFlow on a SavedModel: the source's own, Keras's export, or onnx2tf's from ONNX",
    ),
    Target(
        id="server/ort-cuda",
        runtime="portability.runtimes.ort:OrtCuda",
        description="ONNX Runtime, CUDA execution provider (needs onnxruntime-gpu and a CUDA GPU)",
    ),
    Target(
        id="server/keras",
        runtime="portability.runtimes.keras_model:KerasModel",
        description="Keras 3 (TensorFlow backend) on the .keras model (the reference of Keras sources)",
    ),
    Target(
        id="server/torch",
        runtime="portability.runtimes.torch_eager:TorchEager",
        description="eager PyTorch on the torch.export program (the reference of .pt2 sources)",
    ),
    Target(
        id="server/mxnet",
        runtime="portability.runtimes.mxnet:Mxnet",
        description="MXNet 1.9 on the legacy checkpoint, in its own environment (the reference of MXNet sources)",
    ),
]
