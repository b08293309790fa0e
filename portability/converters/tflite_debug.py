"""TensorFlow Lite's selective quantization and per-layer quantization statistics, by ONNX node.

TFLite's full-integer quantizer keeps chosen ops in float when it is told their output tensors' names
(``tf.lite.experimental.QuantizationDebugOptions(denylisted_nodes=…)``, applied by its
``QuantizationDebugger``), and its debugger measures each quantized op's error against the same op in float
(``layer_statistics``). Both speak the **TFLite** model's tensor names, which come from the SavedModel's ops,
which onnx2tf names after the Keras layers it makes (``model_2/tf.nn.convolution_1/convolution``), never after
the ONNX nodes (``node_conv2d_1``); a fused op's name joins its parts with ``;``
(``model_2/tf.nn.relu_1/Relu;model_2/tf.math.add_1/Add;model_2/tf.nn.convolution_1/convolution;Const_9``).

The bridge is onnx2tf's **layer record** (``onnx2tf_run``, written beside the SavedModel as ``LAYERS_FILE``):
which Keras layers each ONNX node's conversion made. ``op_nodes`` reads each TFLite op's ONNX nodes from it;
``float_tensors`` turns ONNX node names into the tensor names TFLite's quantizer denylists.

Also here: the calibration samples of TFLite's full-integer quantization and the meta that states them
(``calibration_meta``, the contract of ``ConvertContext``), and the ``float_nodes`` candidates read from the ONNX
graph alone (``quantizable_nodes``).
"""
from __future__ import annotations

import functools
import json
import math
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from portability.converters.base import ConvertContext
from portability.converters.calibration import batch_of, calibration_batches
from portability.core.errors import ConvertError
from portability.core.protocol import IoMap

#: onnx2tf's layer record in a SavedModelFromOnnx folder: ``{"nodes": [[onnx name, op type], ...] (the graph's
#: order), "layers": {keras layer name: onnx node name}}``
LAYERS_FILE = "onnx2tf_layers.json"
#: TFLite's per-layer statistics (its debugger's defaults) and the SNR made from them
STATS = ("num_elements", "stddev", "mean_error", "max_abs_error", "mean_squared_error")
#: the most samples TFLite's calibration runs
_CAL_MAX_SAMPLES = 100


def calibration(ctx: ConvertContext, io: dict, sig: dict) -> tuple[list[dict[str, np.ndarray]], str]:
    """Representative samples in the TFLite layout, one dict per interpreter call, and what they are (for people:
    their source, how many, TFLite's calibration method: the range of each tensor over all of them, MinMax)."""
    cal, source = ctx.calibration, ctx.calibration_source or "given"
    if not cal:
        rng = np.random.default_rng(0)
        cal = {t["name"]: rng.random([8] + [d or 1 for d in t["shape"][1:]]).astype(t["dtype"]) for t in sig["inputs"]}
        source = "synthesized by the converter (uniform [0, 1) noise, seed 0)"
    calls, n = calibration_batches(cal, batch_of(sig["inputs"]), _CAL_MAX_SAMPLES)
    samples = []
    for c in calls:
        s = {}
        for e in IoMap.from_dict(io).inputs:
            x = np.asarray(c[e.onnx])
            x = x.astype(e.dtype) if x.dtype.kind in "iu" and e.dtype else x  # an int64 input taken as int32
            s[e.onnx] = x.transpose(e.perm) if e.perm else x.reshape(e.shape)
        samples.append(s)
    batches = f" in {len(calls)} batches of {n // len(calls)}" if n != len(calls) else ""
    return samples, f"{source} ({n} samples{batches}, MinMax)"


def calibration_meta(ctx: ConvertContext | None, io: dict, sig: dict) -> tuple[list[dict[str, np.ndarray]], dict]:
    """The samples and the meta every calibrating converter gives (``ConvertContext``): ``calibration`` (its words),
    ``calibration_source`` ("dataset", "file" or "synthesized"; samples handed over without a source: "file"),
    ``calibration_samples`` and ``calibration_method``."""
    ctx = ctx or ConvertContext()
    samples, text = calibration(ctx, io, sig)
    source = ("synthesized" if not ctx.calibration else
              ctx.calibration_source if ctx.calibration_source in ("dataset", "file", "synthesized") else "file")
    n = sum(max(np.shape(v)[0] if np.ndim(v) else 1 for v in s.values()) for s in samples) if samples else 0
    return samples, {"calibration": text, "calibration_source": source, "calibration_samples": n,
                     "calibration_method": "MinMax"}


#: ONNX ops TFLite computes inside the op before them (an activation fused into a convolution or a fully-connected
#: op, a batch norm folded into a convolution's weights), when that op is their only input and they its only use
_FUSED_INTO = {"Relu": {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add"}, "BatchNormalization": {"Conv", "ConvTranspose"}}
#: ONNX ops that make no TFLite op of their own (constants, pass-throughs, shapes folded by the converter)
_NO_OP = {"Constant", "Identity", "Dropout", "Shape", "Size", "ConstantOfShape"}


def float_nodes_option(options: dict[str, Any]) -> list[str]:
    """``options["float_nodes"]``: ONNX node names, each once (a ConvertError for anything else)."""
    names = options.get("float_nodes") or []
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
        raise ConvertError(f"float_nodes must be a list of ONNX node names, not {names!r}"[:300])
    return list(dict.fromkeys(names))


def quantizable_nodes(graph) -> list[str]:
    """The nodes of ``graph`` (an ONNX GraphProto) with a quantized TFLite op of their own, in the graph's order:
    every node but those that make no op (``_NO_OP``) and those TFLite fuses into the op before (``_FUSED_INTO``:
    a Conv's Relu is its Conv's op, and naming either in ``float_nodes`` keeps both float)."""
    made = {o: n for n in graph.node for o in n.output}
    uses: dict[str, int] = {}
    for n in graph.node:
        for x in n.input:
            uses[x] = uses.get(x, 0) + 1
    out = []
    for n in graph.node:
        first = made.get(n.input[0]) if n.input else None
        fused = first is not None and first.op_type in _FUSED_INTO.get(n.op_type, ()) and uses.get(n.input[0]) == 1
        if n.name and n.op_type not in _NO_OP and not fused:
            out.append(n.name)
    return out


def feeds(samples: list[dict[str, np.ndarray]], io: dict) -> Callable[[], Iterable[dict[str, np.ndarray]]]:
    """The debugger's dataset: each calibration sample (by ONNX input name, TFLite layout) by the TFLite input
    tensor's name (``io``: the SavedModel's ``tflite_io``); ``_ordered`` puts them in a model's input order."""
    names = {e["onnx"]: e["tensor"] for e in io.get("inputs", [])}
    rows = [{names.get(k, k): v for k, v in s.items()} for s in samples]
    return lambda: iter(rows)


def _ordered(content: bytes, dataset: Callable[[], Iterable[dict[str, np.ndarray]]]) -> Callable[[], Iterable[list]]:
    """``dataset``'s samples as lists in the input order of the ``.tflite`` model ``content`` (by name; else as
    given)."""
    _, _, g, _ = _flatbuffer(content)
    order = [g.Tensors(g.Inputs(i)).Name().decode("utf-8", "replace") for i in range(g.InputsLength())]

    def gen():
        for row in dataset():
            yield [row[n] for n in order] if all(n in row for n in order) else list(row.values())
    return gen


def read_record(folder: Path, meta: dict) -> dict:
    """The layer record of a SavedModelFromOnnx artifact (its folder and meta); ConvertError where it has none."""
    name = meta.get("onnx2tf_layers")
    f = Path(folder) / name if name else None
    if f is None or not f.is_file():
        raise ConvertError("TFLite's ops are traced to ONNX nodes (float_nodes) through the record of the layers "
                           "onnx2tf made for each, and this SavedModel has none (not converted from ONNX by onnx2tf here)")
    return json.loads(f.read_text())


def layer_nodes(name: str, layers: dict[str, str]) -> list[str]:
    """The ONNX nodes a TFLite tensor ``name`` names, through the Keras layer names in it (``layers``: the
    record's). Each ``;``-separated part is a TensorFlow op name, ``<model>/<layer>/<op>``: the layer is what lies
    between the model's scope and the op's own name (a layer named after an ONNX node may hold ``/`` itself)."""
    found: list[str] = []
    for part in name.split(";"):
        segs = part.split("/")
        for i in range(1, len(segs) - 1):
            hit = next((layers["/".join(segs[i:j])] for j in range(len(segs) - 1, i, -1)
                        if "/".join(segs[i:j]) in layers), None)
            if hit is not None:
                if hit not in found:
                    found.append(hit)
                break
    return found


def _flatbuffer(content: bytes):
    from ai_edge_litert import schema_py_generated as fb

    model = fb.Model.GetRootAs(content, 0)
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    return fb, model, model.Subgraphs(0), names


def op_nodes(content: bytes, record: dict) -> list[dict]:
    """Each operator of a ``.tflite`` model (its main subgraph, in order) with the ONNX nodes it computes::

        {"index": 3, "op": "CONV_2D", "tensor": <its output's name>, "outputs": [tensor indices],
         "float": <its output is float32>, "nodes": ["node_conv2d_1", "node_relu_1"]}

    The nodes are those its output's name names (``layer_nodes``); an op whose output holds none (the graph's
    output tensors take the signature's names: ``PartitionedCall:0``) is known by its constant inputs (weights and
    biases keep their layers' names). An op onnx2tf or TFLite added that maps to no layer has no nodes."""
    fb, model, g, names = _flatbuffer(content)
    made = {g.Outputs(i) for i in range(g.OutputsLength())}
    ops = [g.Operators(i) for i in range(g.OperatorsLength())]
    produced = {int(t) for op in ops for t in op.OutputsAsNumpy()} | {int(g.Inputs(i)) for i in range(g.InputsLength())}
    out, layers = [], record.get("layers") or {}
    for i, op in enumerate(ops):
        code = model.OperatorCodes(op.OpcodeIndex())
        outs = [int(t) for t in op.OutputsAsNumpy()]
        tensor = g.Tensors(outs[0]) if outs else None
        name = tensor.Name().decode("utf-8", "replace") if tensor is not None else ""
        nodes = layer_nodes(name, layers)
        if not nodes:
            for t in (int(t) for t in op.InputsAsNumpy() if t >= 0 and int(t) not in produced):
                nodes += [n for n in layer_nodes(g.Tensors(t).Name().decode("utf-8", "replace"), layers) if n not in nodes]
        out.append({"index": i, "op": names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "CUSTOM"),
                    "tensor": name, "outputs": outs, "graph_output": bool(set(outs) & made),
                    "float": tensor is not None and tensor.Type() == fb.TensorType.FLOAT32, "nodes": nodes})
    return out


def float_tensors(content: bytes, record: dict, float_nodes: Iterable[str]) -> tuple[list[str], list[str]]:
    """The output tensor names of the ops of ``content`` (the calibrated ``.tflite`` model TFLite's quantizer
    reads) that compute any of the ONNX nodes ``float_nodes``, and every ONNX node those ops compute (in the
    graph's order): what ``QuantizationDebugOptions(denylisted_nodes=…)`` keeps in float, and what that keeps.

    A fused op is one: naming any of its nodes keeps all of them float (a Conv and the Relu TFLite fuses into it).
    Raises ConvertError naming each name that is no node of the model onnx2tf converted. A node that no op
    computes (folded away by onnx2tf's simplifier or TFLite's converter: a Flatten, a constant's Reshape) has
    nothing to keep in float: it is left out of what is kept, and the meta says so (``float_nodes_without_op``)."""
    asked = list(dict.fromkeys(float_nodes))
    order = [n for n, _ in record.get("nodes") or []]
    missing = [n for n in asked if n not in order]
    if missing:
        raise ConvertError(f"float_nodes: no ONNX node named {', '.join(map(repr, missing[:5]))} in the model onnx2tf "
                           f"converted ({len(order)} nodes: {', '.join(order[:8])}{' …' if len(order) > 8 else ''})",
                           node=missing[0])
    ops = [op for op in op_nodes(content, record) if set(op["nodes"]) & set(asked)]
    covered = {n for op in ops for n in op["nodes"]}
    return [op["tensor"] for op in ops], [n for n in order if n in covered]


def float_nodes_of(content: bytes, record: dict) -> set[str]:
    """The ONNX nodes the ops of a quantized ``.tflite`` model that compute in float32 compute ((de)quantize ops
    aside): what its quantizer really kept float."""
    return {n for op in op_nodes(content, record) if op["float"] and op["op"] not in ("QUANTIZE", "DEQUANTIZE")
            for n in op["nodes"]}


def _quiet(fn):
    """``fn`` without the warnings TensorFlow's debugger raises as it makes its interpreters (``tf.lite.Interpreter``
    is deprecated; keeping every tensor is for debugging): both what it is here."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module=r"tensorflow\.lite\.")
            return fn(*args, **kwargs)
    return run


@_quiet
def quantize_keeping_float(converter, record: dict, float_nodes: list[str],
                           inputs: Callable[[], Iterable[dict[str, np.ndarray]]]) -> tuple[bytes, dict[str, Any]]:
    """Full-integer quantization by ``converter`` (a ``tf.lite.TFLiteConverter`` set up for it: optimizations and
    representative dataset) with the ops computing ``float_nodes`` kept in float, by TFLite's own selective
    quantization: its ``QuantizationDebugger`` calibrates once, and quantizes with those ops' output tensors in
    ``QuantizationDebugOptions(denylisted_nodes=…)`` (``fully_quantize``: the inputs and outputs int8, as without
    them). ``inputs``: the debugger's dataset (``feeds``; not run here).

    Returns the model and its meta: ``float_nodes`` (every ONNX node kept float), ``float_tensors`` (the TFLite
    tensor names denylisted), ``float_nodes_asked`` where that differs from what was asked: more where a fused op
    holds more nodes, fewer where TFLite's quantizer quantized a denylisted op all the same (``float_nodes_refused``
    and a note: a same-scale op — MaxPool, Reshape — between int8 ops stays int8)."""
    import tensorflow as tf

    opts = tf.lite.experimental.QuantizationDebugOptions
    dbg = tf.lite.experimental.QuantizationDebugger(converter=converter, debug_dataset=inputs,
                                                     debug_options=opts(fully_quantize=True))
    tensors, kept = float_tensors(dbg.calibrated_model, record, float_nodes)
    try:
        dbg.options = opts(denylisted_nodes=tensors, fully_quantize=True)
    except ValueError as e:
        # the setter keeps the options, then makes its statistics from the ops its debug model verifies: a
        # denylist that leaves none of those has no statistics, and its quantized model all the same
        if "debug mode" not in str(e):
            raise
    model = dbg.get_nondebug_quantized_model()
    really = float_nodes_of(model, record)
    refused = [n for n in kept if n not in really]
    meta: dict[str, Any] = {"float_nodes": [n for n in kept if n in really], "float_tensors": tensors}
    if meta["float_nodes"] != list(dict.fromkeys(float_nodes)):
        meta["float_nodes_asked"] = list(dict.fromkeys(float_nodes))
    without = [n for n in dict.fromkeys(float_nodes) if n not in kept]
    if without:
        meta["float_nodes_without_op"] = without
    if refused:
        meta["float_nodes_refused"] = refused
        meta["float_notes"] = [f"TFLite's quantizer kept {', '.join(refused)} int8 although denylisted (an op that "
                               "keeps its input's scale, such as MaxPool or Reshape, stays int8 after an int8 op)"]
    return model, meta


def snr_db(signal_power: float, noise_power: float) -> float | None:
    """10·log10(signal/noise) in dB; None without a signal, +inf without noise."""
    if not signal_power or not math.isfinite(signal_power):
        return None
    return math.inf if noise_power <= 0 else round(10 * math.log10(signal_power / noise_power), 3)


def _signal_power(float_values, quantized, scale, zero_point) -> float:
    """The float op's output power, mean(x²): the signal TFLite's error statistics are measured against."""
    return float(np.mean(np.square(np.asarray(float_values, dtype=np.float64))))


@_quiet
def layer_statistics(converter, record: dict, inputs: Callable[[], Iterable[dict[str, np.ndarray]]],
                     float_nodes: list[str] | None = None) -> list[dict[str, Any]]:
    """TFLite's per-layer quantization statistics for a model ``converter`` quantizes fully (as for
    ``quantize_keeping_float``; with ``float_nodes`` kept float), run on ``inputs`` (``feeds``), in the model's
    op order::

        {"layer": <TFLite tensor name>, "op": "CONV_2D", "nodes": [ONNX nodes], "num_elements", "stddev",
         "mean_error", "max_abs_error", "mean_squared_error", "signal_power", "snr_db"}

    Each quantized op's dequantized output against the same op run in float on the same (quantized) input —
    the error that op's own quantization adds (TFLite's ``NumericVerify`` ops) —; ``snr_db`` is
    10·log10(mean(float²) / mean_squared_error)."""
    import tensorflow as tf

    opts = tf.lite.experimental.QuantizationDebugOptions
    debugger = tf.lite.experimental.QuantizationDebugger
    dbg = debugger(converter=converter, debug_dataset=inputs, debug_options=opts(fully_quantize=True))
    tensors = float_tensors(dbg.calibrated_model, record, float_nodes)[0] if float_nodes else []
    if tensors:
        dbg.options = opts(denylisted_nodes=tensors, fully_quantize=True)
    content = dbg.get_debug_quantized_model()
    # a debugger on the instrumented model keeps every tensor: the float operand of each check is there to read
    run = debugger(quant_debug_model_content=content, debug_dataset=_ordered(content, inputs),
                   debug_options=opts(layer_direct_compare_metrics={"signal_power": _signal_power}))
    run.run()
    by_tensor = {t: op for op in op_nodes(content, record) for t in op["outputs"]}
    rows = []
    for name, metrics in run.layer_statistics.items():
        idx = run._numeric_verify_op_details[name]["inputs"][0]  # noqa: SLF001 — the checked op's output
        op = by_tensor.get(idx, {})
        row: dict[str, Any] = {"layer": op.get("tensor") or name, "op": op.get("op"), "nodes": op.get("nodes", [])}
        row.update({k: float(metrics[k]) for k in (*STATS, "signal_power") if k in metrics})
        row["snr_db"] = snr_db(row.get("signal_power", 0.0), row.get("mean_squared_error", 0.0))
        rows.append((op.get("index", -1), row))
    return [row for _, row in sorted(rows, key=lambda r: r[0])]
