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

Options every one of them takes: ``float_nodes``, the ONNX node names kept in float (the quantizer's
``nodes_to_exclude``; the float16 converter's ``node_block_list``): what ``fix`` searches for a quantized
target that loses accuracy (``explain.rescue``). The static and dynamic int8 quantizers also take
``per_channel`` (per-channel weights) and the static one ``calibrate_method`` (``MinMax``, ``Entropy``,
``Percentile``): the calibration alternatives people try first. When a quantizer refuses the model as it is
(a weight that is a Constant node's output where it wants an initializer, shapes it cannot infer), ONNX
Runtime's own ``quant_pre_process`` (symbolic shape inference, constant folding) is run and the quantizer
tried again, and ``meta["preprocessed"]`` says why.

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
from portability.core.errors import ConvertError, NotApplicable, Unavailable
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


def _float_nodes(options: dict[str, Any], work: Path) -> list[str]:
    """``options["float_nodes"]``, each a node of the model (a name that is none is an error, never ignored)."""
    import onnx

    names = list(options.get("float_nodes") or ())
    if names:
        known = {n.name for n in onnx.load(str(work), load_external_data=False).graph.node}
        missing = [n for n in names if n not in known]
        if missing:
            raise ConvertError(f"float_nodes: no node named {', '.join(map(repr, missing[:5]))} in the model")
    return names


def _quantized(what: str, work: Path, quantize, meta: dict) -> None:
    """``quantize(path)`` on the model; when the quantizer refuses it, again on ONNX Runtime's
    ``quant_pre_process`` of it (its documented remedy), ``meta["preprocessed"]`` saying why."""
    try:
        quantize(work)
        return
    except Exception as e:  # noqa: BLE001 — the quantizer's own message, in one line
        first = _failed(what, e)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = work.with_name("preprocessed.onnx")
    try:
        quant_pre_process(str(work), str(pre))
    except Exception as e:  # noqa: BLE001
        raise ConvertError(f"{first}; quant_pre_process failed too: {str(_failed('pre-processing', e))[:400]}") from None
    try:
        quantize(pre)
    except Exception as e:  # noqa: BLE001
        raise ConvertError(f"{first}; after quant_pre_process: {_failed(what, e)}") from None
    meta["preprocessed"] = f"quant_pre_process (the quantizer refused the model as it is: {str(first)[:300]})"


class _OrtQuant(Converter):
    """ONNX in, ONNX out, by ONNX Runtime's tools; each makes one variant, asked for by its targets only."""

    output_format = "onnx"
    cost = 2  # never on a route that does not ask for it
    uses = ("onnxruntime",)
    keeps_float = True

    def version(self) -> str:
        return "2+onnxruntime" + package_version("onnxruntime")

    @classmethod
    def quantizable_nodes(cls, graph) -> list[str]:
        """The nodes of ``graph`` (an ONNX GraphProto) this converter quantizes: ``float_nodes`` candidates."""
        ops = cls._op_types()
        return [n.name for n in graph.node if n.name and n.op_type in ops]

    @classmethod
    def _op_types(cls) -> set[str]:
        return set()


class DynInt8FromOnnx(_OrtQuant):
    variants = {"quant": ("dynint8",)}

    @classmethod
    def _op_types(cls) -> set[str]:
        from onnxruntime.quantization.registry import IntegerOpsRegistry

        return set(IntegerOpsRegistry)

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        out = out_dir / "model.onnx"
        meta: dict[str, Any] = {"quantization": "dynamic int8 (onnxruntime.quantization)"}
        with tempfile.TemporaryDirectory(prefix="portability-quant-") as tmp:
            work = Path(tmp) / "model.onnx"
            _plain_copy(src.path, work)
            excluded = _float_nodes(options, work)
            _quantized("dynamic quantization", work, lambda m: quantize_dynamic(
                m, out, weight_type=QuantType.QInt8, nodes_to_exclude=excluded,
                per_channel=bool(options.get("per_channel"))), meta)
        return _described(out, {**meta, **_said(options, excluded)})


def _said(options: dict[str, Any], excluded: list[str]) -> dict[str, Any]:
    """The options that changed the variant, in its meta."""
    out: dict[str, Any] = {"float_nodes": excluded} if excluded else {}
    for k in ("per_channel", "calibrate_method"):
        if options.get(k):
            out[k] = options[k]
    return out


#: ``calibrate_method`` -> ONNX Runtime's CalibrationMethod member
CALIBRATION_METHODS = ("MinMax", "Entropy", "Percentile")


class QdqInt8FromOnnx(_OrtQuant):
    variants = {"quant": ("qdq",)}
    uses_calibration = True
    fixes = (
        {"name": "per-channel weights (quantize_static per_channel=True)", "options": {"per_channel": True},
         "drift_only": True},
        {"name": "entropy calibration (calibrate_method Entropy)", "options": {"calibrate_method": "Entropy"},
         "drift_only": True},
        {"name": "percentile calibration (calibrate_method Percentile, 99.999)",
         "options": {"calibrate_method": "Percentile"}, "drift_only": True},
    )

    @classmethod
    def _op_types(cls) -> set[str]:
        """What ``quantize_static`` quantizes when not told which op types: its QDQ and QLinear registries'."""
        from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

        return set(QDQRegistry) | set(QLinearOpsRegistry)

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        method = options.get("calibrate_method") or "MinMax"
        if method not in CALIBRATION_METHODS:
            raise ConvertError(f"calibrate_method {method!r} not in {', '.join(CALIBRATION_METHODS)}")
        cal, source, kind = ctx.calibration, ctx.calibration_source or "given", ctx.calibration_source or "dataset"
        if not cal:
            sig = (ctx.signature or {}).get("inputs") or []
            rng = np.random.default_rng(0)
            cal = {t["name"]: rng.random([8] + [d if isinstance(d, int) and d > 0 else 1 for d in t["shape"][1:]]).astype(t["dtype"])
                   for t in sig}
            source, kind = "synthesized by the converter (uniform [0, 1) noise, seed 0)", "synthesized"
        out = out_dir / "model.onnx"
        meta: dict[str, Any] = {"quantization": f"static int8, QDQ format (onnxruntime.quantization, {method})"}
        with tempfile.TemporaryDirectory(prefix="portability-quant-") as tmp:
            work = Path(tmp) / "model.onnx"
            _plain_copy(src.path, work)
            excluded = _float_nodes(options, work)
            calls, n = calibration_batches(cal, batch_of(read_signature(work)["inputs"], ctx.input_shapes),
                                           _CAL_MAX_SAMPLES)

            def quantize(model: Path) -> None:
                quantize_static(model, out, _Reader(calls), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                                weight_type=QuantType.QInt8, nodes_to_exclude=excluded,
                                per_channel=bool(options.get("per_channel")),
                                calibrate_method=getattr(CalibrationMethod, method),
                                extra_options={"CalibTensorRangeSymmetric": False, "ActivationSymmetric": False})

            _quantized("static QDQ quantization", work, quantize, meta)
        return _described(out, {**meta, **_said(options, excluded),
                                 "calibration": f"{source} ({_counted(n, len(calls))}, {method})",
                                 "calibration_source": kind, "calibration_samples": n, "calibration_method": method})


def _Reader(calls: list[dict]):
    """ONNX Runtime's calibration data reader over the prepared calls (a fresh one per quantizer run)."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(calls)

        def get_next(self):
            return next(self._it, None)

    return Reader()


class Fp16FromOnnx(_OrtQuant):
    variants = {"quant": ("fp16",)}

    @classmethod
    def quantizable_nodes(cls, graph) -> list[str]:
        from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

        return [n.name for n in graph.node if n.name and n.op_type not in DEFAULT_OP_BLOCK_LIST
                and n.op_type not in ("Constant", "Cast", "Shape")]

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        out = out_dir / "model.onnx"
        with tempfile.TemporaryDirectory(prefix="portability-quant-") as tmp:
            work = Path(tmp) / "model.onnx"
            model = _plain_copy(src.path, work)
            kept = _float_nodes(options, work)
            try:
                half = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=False,
                                                node_block_list=kept or None)
            except Exception as e:  # noqa: BLE001
                raise _failed("float16 conversion", e) from None
        onnx.save(half, str(out))
        return _described(out, {"quantization": "float16 weights and activations, float32 inputs and outputs "
                                                "(onnxruntime.transformers.float16)", **_said(options, kept)})


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

    @classmethod
    def quantizable_nodes(cls, graph) -> list[str]:
        inits = {t.name for t in graph.initializer}
        return [n.name for n in graph.node if n.name and n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in inits]

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        import onnx

        out = out_dir / "model.onnx"
        model = onnx.load(str(src.path))
        if not _has_op(model.graph, "MatMul"):
            raise NotApplicable(_NOTHING_TO_Q4)  # known before the quantizer's import (half a second) and its pass
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        with tempfile.TemporaryDirectory(prefix="portability-quant-") as tmp:
            model = _plain_copy(model, Path(tmp) / "model.onnx")
            kept = _float_nodes(options, Path(tmp) / "model.onnx")
            try:
                q = MatMulNBitsQuantizer(model, bits=4, block_size=_Q4_BLOCK, is_symmetric=True,
                                         nodes_to_exclude=kept or None)
                q.process()
            except Exception as e:  # noqa: BLE001
                raise _failed("4-bit weight quantization", e) from None
            made = sum(n.op_type == "MatMulNBits" for n in q.model.model.graph.node)
            if not made:
                raise NotApplicable(_NOTHING_TO_Q4)
            q.model.save_model_to_file(str(out), use_external_data_format=False)
        return _described(out, {"quantization": f"4-bit weights, MatMulNBits in symmetric blocks of {_Q4_BLOCK}, "
                                                "float activations (onnxruntime.quantization.matmul_nbits_quantizer)",
                                 **_said(options, kept)})
