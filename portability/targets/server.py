"""Server targets: ONNX Runtime and the ONNX reference evaluator, on the (snapshotted) ONNX model."""
from portability.converters.onnx_snapshot import SNAPSHOT
from portability.targets.base import Target


TARGETS = [
    Target(
        id="server/ort-cpu",
        runtime="portability.runtimes.ort:OrtCpu",
        converters=(SNAPSHOT,),
        description="ONNX Runtime, CPU execution provider, all graph optimizations (the reference)",
    ),
    Target(
        id="server/ort-cpu-noopt",
        runtime="portability.runtimes.ort:OrtCpu",
        converters=(SNAPSHOT,),
        options={"graph_optimization": "disabled"},
        description="ONNX Runtime, CPU, graph optimizations disabled (catches optimizer bugs)",
    ),
    Target(
        id="server/onnx-reference",
        runtime="portability.runtimes.onnx_reference:OnnxReference",
        converters=(SNAPSHOT,),
        gating=False,
        run_timeout_s=600,
        time_budget_s=2.0,  # its latency is no platform's: a slow model is not timed at all (min_runs 0)
        min_runs=0,
        description="onnx.reference evaluator: an independent, slow implementation of the spec "
        "(a cross-check: it has known wrong kernels)",
    ),
    Target(
        id="server/tf",
        runtime="portability.runtimes.tf_savedmodel:TfSavedModel",
        converters=(SNAPSHOT, ("portability.converters.onnx2tf:SavedModelFromOnnx", {})),
        description="TensorFlow on the SavedModel onnx2tf makes of the model (the ONNX -> TF hop)",
    ),
    Target(
        id="server/ort-cuda",
        runtime="portability.runtimes.ort:OrtCuda",
        converters=(SNAPSHOT,),
        description="ONNX Runtime, CUDA execution provider (needs onnxruntime-gpu and a CUDA GPU)",
    ),
]
