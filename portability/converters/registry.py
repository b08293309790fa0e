"""The converter registry: every edge of the converter graph (``engine.plan`` finds routes through it).

Adding a converter is one file and one line here; no target is edited to gain a route."""
from __future__ import annotations

CONVERTERS = (
    # snapshots: the first step from a source of each format
    "portability.converters.onnx_snapshot:OnnxFromOnnx",
    "portability.converters.snapshots:KerasFromKeras",
    "portability.converters.snapshots:SavedModelFromSavedModel",
    "portability.converters.snapshots:TfliteFromTflite",
    "portability.converters.snapshots:TfjsFromTfjs",
    "portability.converters.snapshots:TorchFromTorch",
    "portability.converters.mxnet_onnx:MxnetFromMxnet",
    # ONNX, the hub
    "portability.converters.onnx2tf:SavedModelFromOnnx",
    "portability.converters.ort_format:OrtFromOnnx",
    "portability.converters.onnx2tf2:TfliteFromOnnx2",
    "portability.converters.ort_quant:DynInt8FromOnnx",
    "portability.converters.ort_quant:QdqInt8FromOnnx",
    "portability.converters.ort_quant:Fp16FromOnnx",
    "portability.converters.ort_quant:Q4FromOnnx",
    # TensorFlow's own converters (from onnx2tf's or a framework's SavedModel)
    "portability.converters.onnx2tf:TfliteFromSavedModel",
    "portability.converters.onnx2tf:Int8TfliteFromSavedModel",
    "portability.converters.tfjs:TfjsFromSavedModel",
    # native exporters
    "portability.converters.keras_export:SavedModelFromKeras",
    "portability.converters.tf2onnx:OnnxFromSavedModel",
    "portability.converters.torch_onnx:OnnxFromTorch",
    "portability.converters.torch_onnx:OnnxFromTorchScript",
    "portability.converters.litert_torch:TfliteFromTorch",
    "portability.converters.mxnet_onnx:OnnxFromMxnet",
    "portability.converters.executorch:PteFromTorch",
    "portability.converters.coreml:CoremlFromTorch",
    "portability.converters.coreml:CoremlFromSavedModel",
)


def fix_hint(op: str | None, steps) -> str | None:
    """The hint for a target that failed on ``op`` (``FlexErf``: a TensorFlow op left in a ``.tflite``) when a
    converter of its chain (``steps``: converter paths or class names) declares a fix for that op (its
    ``fixes``, which ``--fix`` tries): None otherwise."""
    from portability.core.target import load_class

    if not op:
        return None
    bare = op[4:] if op.startswith("Flex") else op
    paths = {c.rsplit(":", 1)[-1]: c for c in CONVERTERS}
    for step in dict.fromkeys(s.rsplit(":", 1)[-1] for s in steps):
        if step not in paths:
            continue
        for fix in load_class(paths[step]).fixes:
            if bare in fix.get("ops", ()):
                name = fix["name"].replace("{ops}", bare)
                return f"--fix retries the conversion with {name} and names the setting that passes"
    return None
