"""ONNX -> TensorFlow SavedModel and TFLite (fp32, fp16, dynamic-range int8, full int8) through onnx2tf.

onnx2tf runs **once** per model: ``SavedModelFromOnnx`` keeps its SavedModel and its fp32/fp16 ``.tflite``
files in one cache entry; ``TfliteFromSavedModel`` then picks a float variant or quantizes (dynamic range)
and ``Int8TfliteFromSavedModel`` quantizes fully with calibration data, both sub-second from the
SavedModel — the same ``TFLiteConverter.from_saved_model`` path onnx2tf's own ``-oiqt`` takes. Targets use
``tflite_chain(quant)``. The full-integer variant keeps chosen ONNX nodes in float (``float_nodes``) by
TensorFlow Lite's own selective quantization, its ops traced back to the ONNX nodes through the record of the
layers onnx2tf made for each (``tflite_debug``).

onnx2tf runs as a subprocess on a **copy** of the model (it rewrites its input in place), its ``onnxsim``
passes served by one process (``onnx2tf_run``, which also describes the files it wrote), a seeded-noise
``calibration_image_sample_data_*.npy`` in its working folder (it downloads one for any 3-channel input
otherwise), and proxies pointing at a closed port: nothing it does can reach the network. The exact GELU and
``Erf`` are made from TFLite's built-ins first (``tflite_builtins``).
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from portability.converters.onnx_snapshot import SNAPSHOT
from portability.converters.onnx2tf_log import failure, meaningful_lines
from portability.converters.base import ConvertContext, Converter, package_version, require, run_tool
from portability.converters.tflite_builtins import UNFUSED, builtin_notes, for_tflite
from portability.converters.calibration import converter_error_lines
from portability.converters.shapes import fix_input_shapes, onnx2tf_args
from portability.converters.tflite_layout import describe_float_files, describe_tflite, layout_notes
from portability.converters.tflite_debug import LAYERS_FILE, calibration_meta, float_nodes_option, quantizable_nodes
from portability.converters.tflite_debug import calibration as _calibration  # noqa: F401 (its former name here)
from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.model import read_signature
from portability.core.protocol import IoMap
from portability.core.errors import ConvertError

SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
QUANTS = ("fp32", "fp16", "dynint8", "int8")
_FLOAT_FILES = {"fp32": "float32", "fp16": "float16"}


def tflite_chain(quant: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The converter steps from the source ONNX model to a ``.tflite`` file of ``quant``."""
    if quant not in QUANTS:
        raise ValueError(f"quant must be one of {QUANTS}, not {quant!r}")
    pick = ("portability.converters.onnx2tf:Int8TfliteFromSavedModel", {}) if quant == "int8" else \
        ("portability.converters.onnx2tf:TfliteFromSavedModel", {"quant": quant})
    return (SNAPSHOT, ("portability.converters.onnx2tf:SavedModelFromOnnx", {}), pick)


def _versions() -> str:
    return f"12+onnx2tf{package_version('onnx2tf')}+tf{package_version('tensorflow-cpu') if package_version('tensorflow-cpu') != 'absent' else package_version('tensorflow')}"


#: checked in this order: the extra first (then the setup command still to run), then what `portability setup
#: mobile` adds to it
_EXTRA = f"{install('mobile')}, then: {install('onnx2tf')}"
_NEEDS = {"tensorflow": _EXTRA, "ai_edge_litert": _EXTRA, "onnx2tf": install("onnx2tf"), "tf_keras": install("onnx2tf")}
#: what onnx2tf itself imports (onnx_graphsurgeon, sng4onnx) or runs (onnxsim: without it onnx2tf silently skips
#: its simplification and converts a different graph), from the [mobile] extra
_ONNX2TF_NEEDS = {**_NEEDS, "onnx_graphsurgeon": _EXTRA, "sng4onnx": _EXTRA, "onnxsim": _EXTRA}


#: onnx2tf's options a check may add (``converter_options``: ``{"SavedModelFromOnnx": {"args": [...]}}``),
#: each with whether it takes names after it: the ones that change how ops are converted, never where files go
ONNX2TF_OPTIONS = {"-rtpo": True, "-kat": True, "-kt": True, "-nuo": False, "-dgc": False, "-ebu": False,
                   "-ofgd": False, "-eatfp16": False, "-agj": False}


def extra_args(args: Any) -> list[str]:
    """``args`` checked against ONNX2TF_OPTIONS (a ConvertError names what is refused)."""
    if not args:
        return []
    if not isinstance(args, list) or not all(isinstance(a, str) and a and len(a) < 200 for a in args):
        raise ConvertError("onnx2tf args must be a list of strings")
    out, takes = [], False
    for a in args:
        if a.startswith("-"):
            if a not in ONNX2TF_OPTIONS:
                raise ConvertError(f"onnx2tf option {a} is not one a check may add (known: {', '.join(ONNX2TF_OPTIONS)})")
            takes = ONNX2TF_OPTIONS[a]
        elif not takes or not all(c.isalnum() or c in "_.:/-" for c in a):
            raise ConvertError(f"onnx2tf argument {a!r} follows no option that takes names")
        out.append(a)
    return out


def failed(p, onnx_path: Path, label: str = "onnx2tf") -> ConvertError:
    """A failed onnx2tf run (``p``, a CompletedProcess) as the one-line ConvertError naming its op and node."""
    what, op, node = failure(p.stdout, onnx_path)
    where = (f" at {op}" if op else "") + (f" node '{node}'" if node else "")
    return ConvertError(f"{label} failed (exit {p.returncode}){where}: {what}", op=op, node=node)


def run_onnx2tf(onnx_path: Path, out: Path, timeout_s: float | None = None, input_shapes: dict[str, list[int]] | None = None,
                args: list[str] | None = None, describe: tuple[dict, Path] | None = None) -> tuple[str, tuple[dict, dict] | None]:
    """Run onnx2tf on a copy of ``onnx_path`` into ``out`` (SavedModel with a signature + float tflite),
    with ``input_shapes`` as its ``--overwrite_input_shape`` and ``args`` (``extra_args``) after them.

    Returns onnx2tf's log and, with ``describe`` (the ONNX signature and the model the layout probes run), the
    files' mappings (``describe_float_files``) as onnx2tf's process, TensorFlow imported, made them (None where it
    could not). Raises ConvertError with the meaningful lines (and failing op) on failure."""
    import json

    from portability.converters.onnx2tf_run import DESCRIBE, LAYERS, MODULE

    with tempfile.TemporaryDirectory(prefix="portability-onnx2tf-") as scratch:
        work = Path(scratch)
        shutil.copyfile(onnx_path, work / "model.onnx")  # onnx2tf rewrites its input in place
        np.save(work / SAMPLE_FILE, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))
        spec = work / "describe.json"
        if describe:
            spec.write_text(json.dumps({"signature": describe[0], "onnx": str(describe[1]), "folder": str(work / "out"),
                                        "files": {q: str(work / "out" / f"model_{s}.tflite") for q, s in _FLOAT_FILES.items()}}))
        # onnx2tf's command line, its onnxsim passes served by one process (onnx2tf_run); this environment's bin first
        cmd = [sys.executable, "-m", MODULE, *([DESCRIBE, str(spec)] if describe else []), LAYERS, str(work / LAYERS_FILE),
               "-i", "model.onnx", "-o", str(work / "out"), "-osd", *onnx2tf_args(input_shapes), *extra_args(args)]
        p = run_tool(cmd, "onnx2tf", timeout_s, cwd=work, TF_CPP_MIN_LOG_LEVEL="2",
                     PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        tflite = work / "out" / "model_float32.tflite"
        if p.returncode != 0 or not tflite.is_file():
            raise failed(p, onnx_path)
        done = json.loads(spec.read_text()).get("described") if describe else None
        if (work / LAYERS_FILE).is_file():  # the layers onnx2tf made for each ONNX node (tflite_debug)
            shutil.move(str(work / LAYERS_FILE), str(work / "out" / LAYERS_FILE))
        shutil.move(str(work / "out"), str(out))
        return p.stdout, tuple(done) if done else None


class SavedModelFromOnnx(Converter):
    """The onnx2tf step: a SavedModel (``path`` is its ``saved_model.pb``, signature ``serving_default``).

    Its folder also holds ``tflite/{fp32,fp16}.tflite``, onnx2tf's float files, which the TFLite steps
    pick from (a SavedModel loader ignores them; the SavedModel's size leaves them out: ``not_part``), and
    ``tflite/onnx2tf_layers.json``, the Keras layers onnx2tf made for each ONNX node (``meta["onnx2tf_layers"]``),
    by which ``float_nodes`` finds the TFLite ops of ONNX nodes.

    A model with dynamic input dims is converted at the check's static shapes (``ctx.input_shapes``):
    onnx2tf gets them as ``--overwrite_input_shape`` and the mapping is read from a copy of the model
    whose inputs are fixed to them (``meta["input_shapes"]``)."""

    output_format = "saved_model"
    pool = "tensorflow"  # it imports TensorFlow: its worker forks from the pool that imported it
    uses_shapes = True
    uses = ("onnx2tf", "tensorflow")
    requires = _ONNX2TF_NEEDS
    fixes = (
        # the ops onnx2tf can build from TFLite built-ins (-rtpo, its help): a Flex op or a missing kernel otherwise
        {"name": "onnx2tf -rtpo {ops} (those ops from TFLite built-ins)", "options": {"args": ["-rtpo", "{ops}"]},
         "ops": ("Asin", "Acos", "Atan", "Abs", "PReLU", "LeakyReLU", "Power", "GatherND", "Neg", "HardSwish", "Erf",
                 "GeLU", "MatMulInteger")},
        {"name": "onnx2tf -nuo (no onnxsim simplification)", "options": {"args": ["-nuo"]}},
        {"name": "onnx2tf -dgc (grouped convolutions split)", "options": {"args": ["-dgc"]}, "ops": ("Conv",)},
        {"name": "onnx2tf -ebu (batched MatMul unfolded)", "options": {"args": ["-ebu"]}, "ops": ("MatMul", "Gemm")},
        {"name": "onnx2tf -kat (input shapes kept as given)", "options": {"args": ["-kat", "{inputs}"]}},
        {"name": "onnx2tf -ofgd (the GPU delegate's op choices)", "options": {"args": ["-ofgd"]}},
        {"name": "onnx2tf -agj (its own search for parameter replacements)", "options": {"args": ["-agj"]},
         "drift_only": True},
    )
    fix_command = "onnx2tf -i model.onnx -o saved_model -osd {args}"

    def version(self) -> str:
        return _versions()

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        require(self.requires, "to convert to TFLite")
        shapes = self.shapes_used(ctx)
        with tempfile.TemporaryDirectory(prefix="portability-fixed-") as tmp:
            model = src.path
            if shapes:
                model = Path(tmp) / "model.onnx"
                try:
                    fix_input_shapes(src.path, model, shapes)
                except Exception as e:
                    raise ConvertError(f"fixing the input shapes {shapes} failed: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
            sig = read_signature(model) if shapes or not ctx.signature else ctx.signature
            model, probed, args, done = for_tflite(model, Path(tmp), out_dir, extra_args(options.get("args")))
            art = self._convert(model, out_dir, ctx, shapes, sig, args, probed)
        art.meta.update(done, notes=art.meta["notes"] + builtin_notes(done))
        art.meta["not_part"] += [UNFUSED] if "unfused" in done else []  # plain_saved_model: the model as given
        return art

    def _convert(self, model: Path, out_dir: Path, ctx: ConvertContext, shapes: dict | None, sig: dict,
                 args: list[str], probed: Path | None = None) -> Artifact:
        """``probed``: the model the layout probes run in ONNX Runtime on ``sig``'s inputs (``model`` unless its
        inputs were retyped)."""
        raw = out_dir / ".onnx2tf"
        log, described = run_onnx2tf(model, raw, ctx.timeout_s, shapes, args, describe=(sig, probed or model))
        (out_dir / "tflite").mkdir()
        for q, stem in _FLOAT_FILES.items():
            shutil.move(str(raw / f"model_{stem}.tflite"), str(out_dir / "tflite" / f"{q}.tflite"))
        if (raw / LAYERS_FILE).is_file():
            shutil.move(str(raw / LAYERS_FILE), str(out_dir / "tflite" / LAYERS_FILE))
        for f in raw.iterdir():
            if f.suffix != ".tflite":
                shutil.move(str(f), str(out_dir / f.name))
        shutil.rmtree(raw)
        float_io, io = described or describe_float_files({q: out_dir / "tflite" / f"{q}.tflite" for q in _FLOAT_FILES},
                                                         out_dir, sig, probed or model)
        warnings = [ln.strip() for ln in meaningful_lines(log, 6) if "WARN" in ln]
        layers = f"tflite/{LAYERS_FILE}" if (out_dir / "tflite" / LAYERS_FILE).is_file() else None
        return Artifact(path=out_dir / "saved_model.pb", format="saved_model", sha256="", meta={
            "onnx_signature": sig,
            "tflite_io": io,  # the SavedModel's signature: the fp32 tflite's tensors, its own layouts
            "float_tflite": {q: f"tflite/{q}.tflite" for q in _FLOAT_FILES},
            "float_tflite_io": float_io,
            "notes": layout_notes(io, "the SavedModel"),
            "not_part": ["tflite"],  # onnx2tf's float .tflite files and its layer record: for the TFLite steps
            **({"onnx2tf_layers": layers} if layers else {}),
            "onnx2tf_sample_data": "seeded noise (onnx2tf's internal checks only; never the calibration data)",
            "converter_warnings": warnings,
            **({"input_shapes": shapes} if shapes else {}),
            **({"onnx2tf_args": args} if args else {}),
        })


def _converter(saved_model: Path, quant: str, samples: list[dict[str, np.ndarray]] | None, io: dict):
    """TensorFlow's converter of ``saved_model``, set up for ``quant`` (for int8: calibrated on ``samples``)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    conv = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    if quant != "fp32":  # fp32/fp16 are reached here only for a native SavedModel (onnx2tf writes its own)
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
    if quant == "fp16":
        conv.target_spec.supported_types = [tf.float16]
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if quant == "int8" else tf.lite.OpsSet.TFLITE_BUILTINS,
                                      tf.lite.OpsSet.SELECT_TF_OPS]
    if quant == "int8":
        keys = {e.onnx: e.key or e.tensor.removeprefix("serving_default_").split(":")[0] for e in IoMap.from_dict(io).inputs}

        def representative():
            for s in samples or []:
                yield {keys[k]: tf.constant(v, dtype=tf.float32 if v.dtype.kind == "f" else v.dtype) for k, v in s.items()}

        conv.representative_dataset = representative
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
    return conv


def _tf_convert(saved_model: Path, quant: str, samples: list[dict[str, np.ndarray]] | None, io: dict,
                keep: tuple[dict, list[str]] | None = None) -> tuple[bytes, dict[str, Any]]:
    """The ``.tflite`` bytes and what the conversion adds to the meta; ``keep``: (onnx2tf's layer record, the
    ONNX nodes kept in float), int8 only (``tflite_debug.quantize_keeping_float``)."""
    conv = _converter(saved_model, quant, samples, io)
    try:
        if keep:
            from portability.converters.tflite_debug import feeds, quantize_keeping_float

            return quantize_keeping_float(conv, keep[0], keep[1], feeds(samples or [], io))
        return conv.convert(), {}
    except ConvertError:
        raise
    except Exception as e:
        lines = converter_error_lines(e)
        flex = re.search(r"\((Flex\w+)\)", " ".join(lines))  # "Node number 1 (FlexErf) failed to prepare"
        raise ConvertError(f"TFLite converter ({quant}) failed" + (f" at {flex.group(1)}, a TensorFlow (Flex) op" if flex else "")
                           + ": " + " | ".join(lines), op=flex.group(1) if flex else None) from None


def _pick(src: Artifact, out_dir: Path, quant: str, ctx: ConvertContext | None,
          float_nodes: list[str] | None = None) -> Artifact:
    sm_meta = src.meta
    out = out_dir / "model.tflite"
    meta: dict[str, Any] = {"quant": quant, "onnx_signature": sm_meta["onnx_signature"]}
    native = "float_tflite" not in sm_meta  # a framework's own SavedModel: every variant by TF's converter
    if quant in _FLOAT_FILES and not native:
        shutil.copyfile(src.folder / sm_meta["float_tflite"][quant], out)
        meta["produced_by"] = "onnx2tf"
    else:
        samples, keep = None, None
        if quant == "int8":
            samples, cal = calibration_meta(ctx, sm_meta["tflite_io"], sm_meta["onnx_signature"])
            meta.update(cal)
        if float_nodes:
            from portability.converters.tflite_debug import read_record

            keep = (read_record(src.folder, sm_meta), float_nodes)
        model, more = _tf_convert(src.folder, quant, samples, sm_meta["tflite_io"], keep)
        out.write_bytes(model)
        meta.update(more)
        meta["produced_by"] = "tf.lite.TFLiteConverter.from_saved_model (" + (
            f"{sm_meta.get('produced_by', 'the given')} SavedModel)" if native else "onnx2tf's SavedModel)")
    io = (sm_meta.get("float_tflite_io") or {}).get(quant) if meta["produced_by"] == "onnx2tf" else None
    if io is None:  # converted from the SavedModel by TensorFlow's converter: the SavedModel's layouts
        io = describe_tflite(out, sm_meta["onnx_signature"], native=native)
        _keep_float_layouts(io, sm_meta["tflite_io"])
    meta["tflite_io"] = io
    meta["notes"] = layout_notes(io, "the .tflite file") + builtin_notes(sm_meta) + meta.pop("float_notes", [])
    return Artifact(path=out, format="tflite", sha256="", meta=meta)


def tflite_layer_statistics(src: Artifact, ctx: ConvertContext | None = None,
                            float_nodes: list[str] | None = None) -> list[dict[str, Any]]:
    """TFLite's per-layer quantization statistics (``tflite_debug.layer_statistics``: each layer's TFLite name,
    its ONNX nodes, TFLite's error statistics and an SNR in dB) of the int8 variant of ``src`` (a
    SavedModelFromOnnx artifact), calibrated and measured on ``ctx.calibration`` as that variant is calibrated
    (``float_nodes``: kept float, as the option does)."""
    from portability.converters.tflite_debug import feeds, layer_statistics, read_record

    io = src.meta["tflite_io"]
    samples, _ = calibration_meta(ctx, io, src.meta["onnx_signature"])
    return layer_statistics(_converter(src.folder, "int8", samples, io), read_record(src.folder, src.meta),
                            feeds(samples, io), float_nodes)


def _keep_float_layouts(io: dict, ref: dict) -> None:
    """Variants share the fp32 graph: reuse its (possibly probed) layouts where the shapes agree."""
    for kind, key in (("inputs", "to_tflite"), ("outputs", "to_onnx")):
        for e, r in zip(io[kind], ref[kind]):
            if e["onnx"] == r["onnx"] and e["shape"] == r["shape"]:
                e[key] = r[key]
    io["resolved_by"] = ref.get("resolved_by", io["resolved_by"])
    if "probe" in ref:
        io["probe"] = ref["probe"]


def plain_saved_model(src: Artifact, out: Path, ctx: ConvertContext) -> Artifact:
    """The SavedModel for TF.js and Core ML: ``src``, or, where its GELUs were fused for TFLite (TensorFlow's
    exact GELU is an ``Erfc``, which they lack), onnx2tf's SavedModel of the model as given, made in ``out``."""
    unfused = src.meta.get("unfused")
    if not unfused:
        return src
    out.mkdir(parents=True)
    return SavedModelFromOnnx()._convert(src.folder / unfused["path"], out, ctx, src.meta.get("input_shapes"),
                                         src.meta["onnx_signature"], list(unfused.get("args") or []))


class TfliteFromSavedModel(Converter):
    """Options: ``quant``: ``fp32`` | ``fp16`` (onnx2tf's files) | ``dynint8`` (dynamic-range weights).

    ``float_nodes`` is refused (a ConvertError, never ignored): TensorFlow Lite keeps chosen ops in float only
    in its full-integer quantizer (``Int8TfliteFromSavedModel``); its dynamic-range and float16 conversions take
    no per-node list."""

    input_format = "saved_model"
    output_format = "tflite"
    pool = "tensorflow"  # it imports TensorFlow: its worker forks from the pool that imported it
    variants = {"quant": ("fp32", "fp16", "dynint8")}
    requires = _NEEDS

    def version(self) -> str:
        return _versions()

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        quant = options.get("quant", "fp32")
        if quant not in ("fp32", "fp16", "dynint8"):
            raise ConvertError(f"TfliteFromSavedModel: quant {quant!r} not in fp32|fp16|dynint8 (int8: Int8TfliteFromSavedModel)")
        if float_nodes_option(options):
            raise ConvertError(f"float_nodes: TensorFlow Lite's {quant} conversion keeps no chosen nodes in float (its "
                               "selective quantization is full-integer only: mobile/tflite-int8, Int8TfliteFromSavedModel)")
        require(self.requires, "to convert to TFLite")
        return _pick(src, out_dir, quant, ctx)


class Int8TfliteFromSavedModel(Converter):
    """Full integer quantization (int8 weights, activations, inputs and outputs), calibrated on
    ``ctx.calibration`` (seeded noise when absent; ``meta["calibration"]`` and ``meta["calibration_source"]`` say
    which, MinMax ranges over at most 100 samples).

    Option ``float_nodes``: ONNX node names whose TFLite ops stay in float (TFLite's selective quantization,
    ``QuantizationDebugOptions(denylisted_nodes=…)``; ``tflite_debug``), the inputs and outputs still int8. An op
    TFLite fused from several nodes (a Conv with its Relu) stays float when any of them is named.
    ``meta["float_nodes"]``: every ONNX node kept float; ``meta["float_tensors"]``: the TFLite tensors denylisted.
    A name that is no node of the model, or a node that made no TFLite op, is a ConvertError naming it."""

    input_format = "saved_model"
    output_format = "tflite"
    pool = "tensorflow"  # it imports TensorFlow: its worker forks from the pool that imported it
    uses_calibration = True
    keeps_float = True
    variants = {"quant": ("int8",)}
    requires = _NEEDS

    def version(self) -> str:
        return _versions()

    @classmethod
    def quantizable_nodes(cls, graph) -> list[str]:
        """The nodes of ``graph`` (an ONNX GraphProto) whose TFLite op is quantized, one per op where the converter
        fuses (a Conv's Relu is its Conv's op: naming either keeps both float), in the graph's order. From the graph
        alone: the conversion's own record (``tflite_debug.op_nodes``) is what ``float_nodes`` is checked against."""
        return quantizable_nodes(graph)

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        nodes = float_nodes_option(options)
        require(self.requires, "to convert to TFLite")
        return _pick(src, out_dir, "int8", ctx, nodes)
