"""Quantized and half-precision ONNX, as ONNX Runtime ships them: what ``server/ort-int8``, ``server/ort-qdq``,
``server/ort-fp16`` and their browser twins run.

- ``DynInt8FromOnnx``: ``onnxruntime.quantization.quantize_dynamic`` with its defaults (int8 weights of the
  ops it quantizes — MatMul, Gemm, Conv, Gather, LSTM, Attention… — activations quantized on the fly per
  inference).
- ``QdqInt8FromOnnx``: ``quantize_static`` in the QDQ format (QuantizeLinear/DequantizeLinear pairs around
  each quantized op; int8 weights and activations), calibrated (MinMax) on the check's inputs.
- ``Fp16FromOnnx``: ``onnxruntime.transformers.float16.convert_float_to_float16`` with float32 inputs and
  outputs kept (the cast at the edges), what the fp16 ONNX variants for WebGPU ship.
- ``Q4FromOnnx``: 4-bit weights, ``onnxruntime.quantization.matmul_nbits_quantizer`` (each MatMul with a
  constant weight becomes ONNX Runtime's ``MatMulNBits``: symmetric blocks of 32, float activations), what
  transformers.js ships as ``q4``. A model with no such MatMul has nothing to quantize: its q4 targets are
  ``skipped``, saying so, rather than run the float model again under another name.

The graph's tensor names stay: a quantized op's output keeps the name of the float op's output.
``meta["quantized_ops"]`` counts the integer ops made; ``meta["output_quant"]`` gives, for an output that a
DequantizeLinear produces, its quantization scale (the drift is then also given in quantization steps).
"""
from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from portability.converters.base import ConvertContext, Converter, package_version
from portability.converters.calibration import batch_of, calibration_batches
from portability.core.artifact import Artifact
from portability.core.errors import ConvertError, Unavailable
from portability.core.model import read_signature

_INTEGER_OPS = ("MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM",
                "QAttention", "QGemm", "QuantizeLinear", "DequantizeLinear", "MatMulNBits")
#: transformers.js's q4: blocks of 32 weights along the reduced axis, symmetric
_Q4_BLOCK = 32
_CAL_MAX_SAMPLES = 64
_MSG_MAX = 1200


def _plain_copy(src, work: Path):
    """The model (a path, or a model loaded already) without its value_info hints (the quantizers re-infer
    shapes, and an exporter's stale hint then contradicts them; the hints are not part of the computation),
    saved to ``work``."""
    import onnx

    model = onnx.load(str(src)) if isinstance(src, (str, Path)) else src
    del model.graph.value_info[:]
    onnx.save(model, str(work))
    return model


def _failed(what: str, e: Exception) -> ConvertError:
    """The error's whole message (every non-empty line, joined), bounded in length."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = " | ".join(lines) or type(e).__name__
    return ConvertError(f"ONNX Runtime's {what} failed: " + (msg if len(msg) <= _MSG_MAX else msg[:_MSG_MAX - 3] + "..."))


def _counted(n: int, calls: int) -> str:
    return f"{n} samples" + (f" in {calls} batches of {n // calls}" if calls and n != calls else "")


def _described(out: Path, meta: dict) -> Artifact:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(out), load_external_data=False)
    ops = Counter(n.op_type for n in model.graph.node)
    meta["quantized_ops"] = {k: v for k, v in sorted(ops.items()) if k in _INTEGER_OPS}
    inits = {t.name: t for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    scales = {}
    for o in model.graph.output:
        n = producer.get(o.name)
        if n is not None and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            s = numpy_helper.to_array(inits[n.input[1]])
            if s.size == 1:
                scales[o.name] = {"scale": float(s.reshape(-1)[0])}
    if scales:
        meta["output_quant"] = scales
    return Artifact(path=out, format="onnx", sha256="", meta=meta)


class _OrtQuant(Converter):
    """ONNX in, ONNX out, by ONNX Runtime's tools; each makes one variant, asked for by its targets only."""

    output_format = "onnx"
    cost = 2  # never on a route that does not ask for it
    uses = ("onnxruntime",)

    def version(self) -> str:
        return "1+onnxruntime" + package_version("onnxruntime")


class DynInt8FromOnnx(_OrtQuant):
    variants = {"quant": ("dynint8",)}

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        out = out_dir / "model.onnx"
        with tempfile.TemporaryDirectory(prefix="portability-quant-") as tmp:
            work = Path(tmp) / "model.onnx"
            _plain_copy(src.path, work)
            try:
                quantize_dynamic(work, out, weight_type=QuantType.QInt8)
            except Exception as e:  # noqa: BLE001 — the quantizer's own message, in one line
                raise _failed("dynamic quantization", e) from None
        return _described(out, {"quantization": "dynamic int8 (onnxruntime.quantization)"})


class QdqInt8FromOnnx(_OrtQuant):
    variants = {"quant": ("qdq",)}
    uses_calibration = True

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        cal, source = ctx.calibration, ctx.calibration_source or "given"
        if not cal:
            sig = (ctx.signature or {}).get("inputs") or []
            rng = np.random.default_rng(0)
            cal = {t["name"]: rng.random([8] + [d if isinstance(d, int) and d > 0 else 1 for d in t["shape"][1:]]).astype(t["dtype"])
                   for t in sig}
            source = "synthesized by the converter (uniform [0, 1) noise, seed 0)"
        out = out_dir / "model.onnx"
        with tempfile.TemporaryDirectory(prefix="portability-quant-") as tmp:
            work = Path(tmp) / "model.onnx"
            _plain_copy(src.path, work)
            calls, n = calibration_batches(cal, batch_of(read_signature(work)["inputs"]), _CAL_MAX_SAMPLES)

            class Reader(CalibrationDataReader):
                def __init__(self):
                    self._it = iter(calls)

                def get_next(self):
                    return next(self._it, None)

            try:
                quantize_static(work, out, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                                weight_type=QuantType.QInt8,
                                extra_options={"CalibTensorRangeSymmetric": False, "ActivationSymmetric": False})
            except Exception as e:  # noqa: BLE001
                raise _failed("static QDQ quantization", e) from None
        return _described(out, {"quantization": "static int8, QDQ format (onnxruntime.quantization, MinMax)",
                                "calibration": f"{source} ({_counted(n, len(calls))})"})


class Fp16FromOnnx(_OrtQuant):
    variants = {"quant": ("fp16",)}

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        out = out_dir / "model.onnx"
        with tempfile.TemporaryDirectory(prefix="portability-quant-") as tmp:
            model = _plain_copy(src.path, Path(tmp) / "model.onnx")
            try:
                half = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=False)
            except Exception as e:  # noqa: BLE001
                raise _failed("float16 conversion", e) from None
        onnx.save(half, str(out))
        return _described(out, {"quantization": "float16 weights and activations, float32 inputs and outputs "
                                                "(onnxruntime.transformers.float16)"})


_NOTHING_TO_Q4 = ("nothing to quantize to 4 bits: the model has no MatMul with a constant weight (MatMulNBits "
                  "replaces MatMul only; Gemm and Conv stay float), so its q4 variant is the float model, which the "
                  "float targets already run")


def _has_op(graph, op_type: str) -> bool:
    """Whether a node of ``op_type`` is in the graph or in a subgraph of one of its nodes (an If's branch, a
    Loop's body)."""
    for node in graph.node:
        if node.op_type == op_type:
            return True
        for a in node.attribute:
            if any(_has_op(g, op_type) for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)):
                return True
    return False


class Q4FromOnnx(_OrtQuant):
    variants = {"quant": ("q4",)}

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        import onnx

        out = out_dir / "model.onnx"
        model = onnx.load(str(src.path))
        if not _has_op(model.graph, "MatMul"):
            raise Unavailable(_NOTHING_TO_Q4)  # known before the quantizer's import (half a second) and its pass
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        with tempfile.TemporaryDirectory(prefix="portability-quant-") as tmp:
            model = _plain_copy(model, Path(tmp) / "model.onnx")
            try:
                q = MatMulNBitsQuantizer(model, bits=4, block_size=_Q4_BLOCK, is_symmetric=True)
                q.process()
            except Exception as e:  # noqa: BLE001
                raise _failed("4-bit weight quantization", e) from None
            made = sum(n.op_type == "MatMulNBits" for n in q.model.model.graph.node)
            if not made:
                raise Unavailable(_NOTHING_TO_Q4)
            q.model.save_model_to_file(str(out), use_external_data_format=False)
        return _described(out, {"quantization": f"4-bit weights, MatMulNBits in symmetric blocks of {_Q4_BLOCK}, "
                                                "float activations (onnxruntime.quantization.matmul_nbits_quantizer)"})
