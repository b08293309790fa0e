"""DynInt8FromOnnx: the ONNX model with ONNX Runtime's dynamic int8 quantization, as ``server/ort-int8`` runs it.

``onnxruntime.quantization.quantize_dynamic`` with its defaults (int8 weights of the ops it quantizes —
MatMul, Gemm, Conv, Gather, LSTM, Attention… — activations quantized on the fly per inference): what a
server or a browser deployment of an int8 ONNX model ships. The graph's tensor names stay: a quantized
op's output keeps the name of the float op's output. ``meta["quantized_ops"]`` counts the integer ops made.
"""
from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version
from portability.core.artifact import Artifact
from portability.core.errors import ConvertError

_INTEGER_OPS = ("MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM",
                "QAttention", "QGemm", "DequantizeLinear")


class DynInt8FromOnnx(Converter):
    output_format = "onnx"
    variants = {"quant": ("dynint8",)}
    cost = 2  # never on a route that does not ask for it
    uses = ("onnxruntime",)

    def version(self) -> str:
        return "1+onnxruntime" + package_version("onnxruntime")

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        out = out_dir / "model.onnx"
        with tempfile.TemporaryDirectory(prefix="portability-quant-") as tmp:
            work = Path(tmp) / "model.onnx"
            model = onnx.load(str(src.path))
            # the quantizer re-infers shapes after transposing Gemm weights: a stale hint in value_info (an
            # exporter's) then contradicts it; the hints are not part of the computation
            del model.graph.value_info[:]
            onnx.save(model, str(work))
            try:
                quantize_dynamic(work, out, weight_type=QuantType.QInt8)
            except Exception as e:  # noqa: BLE001 — the quantizer's own message, in one line
                msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise ConvertError(f"ONNX Runtime's dynamic quantization failed: {msg[:400]}") from None
        ops = Counter(n.op_type for n in onnx.load(str(out), load_external_data=False).graph.node)
        made = {k: v for k, v in sorted(ops.items()) if k in _INTEGER_OPS}
        return Artifact(path=out, format="onnx", sha256="", meta={"quantization": "dynamic int8 (onnxruntime.quantization)",
                                                                   "quantized_ops": made})
