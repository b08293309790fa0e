"""ONNX -> TensorFlow SavedModel and TFLite (fp32, fp16, dynamic-range int8, full int8) through onnx2tf.

onnx2tf runs **once** per model: ``SavedModelFromOnnx`` keeps its SavedModel and its fp32/fp16 ``.tflite``
files in one cache entry; ``TfliteFromSavedModel`` then picks a float variant or quantizes (dynamic range)
and ``Int8TfliteFromSavedModel`` quantizes fully with calibration data, both sub-second from the
SavedModel — the same ``TFLiteConverter.from_saved_model`` path onnx2tf's own ``-oiqt`` takes. Targets use
``tflite_chain(quant)``.

onnx2tf is run as a subprocess (``python -m onnx2tf``) in a scratch folder on a **copy** of the model (it
rewrites its input in place), with this environment's bin folder on PATH (it shells out to ``onnxsim``;
without it, simplification is silently skipped), a seeded-noise ``calibration_image_sample_data_*.npy``
in its working folder (it downloads one for any 3-channel input otherwise), and proxies pointing at a
closed port so that nothing it does can reach the network.
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
from portability.converters.base import ConvertContext, Converter, package_version, require, run_tool
from portability.converters.shapes import fix_input_shapes, onnx2tf_args
from portability.converters.tflite_layout import describe_tflite
from portability.core.artifact import Artifact
from portability.core.model import read_signature
from portability.core.protocol import IoMap
from portability.core.errors import ConvertError

SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
QUANTS = ("fp32", "fp16", "dynint8", "int8")
_FLOAT_FILES = {"fp32": "float32", "fp16": "float16"}
_CAL_MAX_SAMPLES = 100
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOISE = re.compile(r"^(I0000|W0000|E0000|WARNING: All log messages|To enable the following|.*oneDNN custom op"
                    r"|.*cpu_feature_guard|.*tensorflow/core/util/port|\s*$)")


def tflite_chain(quant: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The converter steps from the source ONNX model to a ``.tflite`` file of ``quant``."""
    if quant not in QUANTS:
        raise ValueError(f"quant must be one of {QUANTS}, not {quant!r}")
    pick = ("portability.converters.onnx2tf:Int8TfliteFromSavedModel", {}) if quant == "int8" else \
        ("portability.converters.onnx2tf:TfliteFromSavedModel", {"quant": quant})
    return (SNAPSHOT, ("portability.converters.onnx2tf:SavedModelFromOnnx", {}), pick)


def _versions() -> str:
    return f"2+onnx2tf{package_version('onnx2tf')}+tf{package_version('tensorflow-cpu') if package_version('tensorflow-cpu') != 'absent' else package_version('tensorflow')}"


_NEEDS = {"onnx2tf": "pip install --no-deps onnx2tf==1.29.24 (see requirements/)", "tensorflow": "pip install tensorflow-cpu",
          "tf_keras": "pip install --no-deps tf-keras", "ai_edge_litert": "pip install ai-edge-litert"}


def _require() -> None:
    require(_NEEDS, "to convert to TFLite")


def meaningful_lines(log: str, limit: int = 12) -> list[str]:
    """onnx2tf's output minus colours, TF start-up noise and progress: the lines that explain a failure."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in log.splitlines()]
    lines = [ln for ln in lines if not _NOISE.match(ln)]
    picked = [ln for ln in lines if re.search(r"ERROR|Error|error:|Exception|not supported|Unsupported|onnx_op_type|onnx_op_name", ln)]
    tb = [ln for ln in lines if re.match(r"^\w*(Error|Exception)\b", ln)]
    out = list(dict.fromkeys(picked[-limit:] + tb[-2:]))
    return out[-limit:] or lines[-limit:]


def _failing_op(lines: list[str]) -> tuple[str | None, str | None]:
    """The op (and node) onnx2tf names in its ERROR lines; INFO lines only log the last op it started."""
    op = node = None
    for ln in lines:
        if "ERROR" not in ln:
            continue
        m = re.search(r"(\w+) OP is not yet implemented", ln) or re.search(r"onnx_op_type:\s*(\w+)", ln)
        op = m.group(1) if m else op
        m = re.search(r"onnx_op_name:\s*(\S+)", ln)
        node = m.group(1) if m else node
    return op, node


def run_onnx2tf(onnx_path: Path, out: Path, timeout_s: float | None = None,
                input_shapes: dict[str, list[int]] | None = None) -> str:
    """Run onnx2tf on a copy of ``onnx_path`` into ``out`` (SavedModel with a signature + float tflite),
    with ``input_shapes`` as its ``--overwrite_input_shape``.

    Returns onnx2tf's log. Raises ConvertError with the meaningful lines (and failing op) on failure."""
    with tempfile.TemporaryDirectory(prefix="portability-onnx2tf-") as scratch:
        work = Path(scratch)
        shutil.copyfile(onnx_path, work / "model.onnx")  # onnx2tf rewrites its input in place
        np.save(work / SAMPLE_FILE, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))
        cmd = [sys.executable, "-m", "onnx2tf", "-i", "model.onnx", "-o", str(work / "out"), "-osd",
               *onnx2tf_args(input_shapes)]
        # this environment's bin folder first: onnx2tf runs onnxsim through PATH
        p = run_tool(cmd, "onnx2tf", timeout_s, cwd=work, TF_CPP_MIN_LOG_LEVEL="2",
                     PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        tflite = work / "out" / "model_float32.tflite"
        if p.returncode != 0 or not tflite.is_file():
            lines = meaningful_lines(p.stdout)
            op, node = _failing_op(lines)
            head = f"onnx2tf failed (exit {p.returncode})" + (f" at {op} node '{node}'" if op else "")
            raise ConvertError(head + ": " + " | ".join(ln.strip() for ln in lines if ln.strip()), op=op, node=node)
        shutil.move(str(work / "out"), str(out))
        return p.stdout


class SavedModelFromOnnx(Converter):
    """The onnx2tf step: a SavedModel (``path`` is its ``saved_model.pb``, signature ``serving_default``).

    Its folder also holds ``tflite/{fp32,fp16}.tflite``, onnx2tf's float files, which the TFLite steps
    pick from (a SavedModel loader ignores them; the SavedModel's size leaves them out: ``not_part``).

    A model with dynamic input dims is converted at the check's static shapes (``ctx.input_shapes``):
    onnx2tf gets them as ``--overwrite_input_shape`` and the mapping is read from a copy of the model
    whose inputs are fixed to them (``meta["input_shapes"]``)."""

    output_format = "saved_model"
    uses_shapes = True
    uses = ("onnx2tf", "tensorflow")

    def version(self) -> str:
        return _versions()

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        _require()
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
            return self._convert(model, out_dir, ctx, shapes, sig)

    def _convert(self, model: Path, out_dir: Path, ctx: ConvertContext, shapes: dict | None, sig: dict) -> Artifact:
        raw = out_dir / ".onnx2tf"
        log = run_onnx2tf(model, raw, ctx.timeout_s, shapes)
        (out_dir / "tflite").mkdir()
        for q, stem in _FLOAT_FILES.items():
            shutil.move(str(raw / f"model_{stem}.tflite"), str(out_dir / "tflite" / f"{q}.tflite"))
        for f in raw.iterdir():
            if f.suffix != ".tflite":
                shutil.move(str(f), str(out_dir / f.name))
        shutil.rmtree(raw)
        io = describe_tflite(out_dir / "tflite" / "fp32.tflite", sig, onnx_path=model)
        warnings = [ln.strip() for ln in meaningful_lines(log, 6) if "WARN" in ln]
        return Artifact(path=out_dir / "saved_model.pb", format="saved_model", sha256="", meta={
            "onnx_signature": sig,
            "tflite_io": io,  # the SavedModel's signature has the same tensors and layouts as the fp32 tflite
            "float_tflite": {q: f"tflite/{q}.tflite" for q in _FLOAT_FILES},
            "not_part": ["tflite"],  # onnx2tf's float .tflite files: kept here for the TFLite steps
            "onnx2tf_sample_data": "seeded noise (onnx2tf's internal checks only; never the calibration data)",
            "converter_warnings": warnings,
            **({"input_shapes": shapes} if shapes else {}),
        })


def _calibration(ctx: ConvertContext, io: dict, sig: dict) -> tuple[list[dict[str, np.ndarray]], str]:
    """Representative samples in the TFLite layout, one dict per interpreter call, and their source."""
    cal, source = ctx.calibration, ctx.calibration_source or "given"
    if not cal:
        rng = np.random.default_rng(0)
        cal = {t["name"]: rng.random([8] + [d or 1 for d in t["shape"][1:]]).astype(t["dtype"]) for t in sig["inputs"]}
        source = "synthesized by the converter (uniform [0, 1) noise, seed 0)"
    n = min(min(len(a) for a in cal.values()), _CAL_MAX_SAMPLES)
    samples = []
    for i in range(n):
        s = {}
        for e in IoMap.from_dict(io).inputs:
            x = np.asarray(cal[e.onnx][i:i + 1])
            s[e.onnx] = x.transpose(e.perm) if e.perm else x.reshape(e.shape)
        samples.append(s)
    return samples, f"{source} ({n} samples)"


def _tf_convert(saved_model: Path, quant: str, samples: list[dict[str, np.ndarray]] | None, io: dict) -> bytes:
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
    try:
        return conv.convert()
    except Exception as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip() and "tensorflow/" not in ln][:6]
        raise ConvertError(f"TFLite converter ({quant}) failed: " + " | ".join(lines or [type(e).__name__])) from None


def _pick(src: Artifact, out_dir: Path, quant: str, ctx: ConvertContext | None) -> Artifact:
    sm_meta = src.meta
    out = out_dir / "model.tflite"
    meta: dict[str, Any] = {"quant": quant, "onnx_signature": sm_meta["onnx_signature"]}
    native = "float_tflite" not in sm_meta  # a framework's own SavedModel: every variant by TF's converter
    if quant in _FLOAT_FILES and not native:
        shutil.copyfile(src.folder / sm_meta["float_tflite"][quant], out)
        meta["produced_by"] = "onnx2tf"
    else:
        samples = None
        if quant == "int8":
            samples, meta["calibration"] = _calibration(ctx or ConvertContext(), sm_meta["tflite_io"], sm_meta["onnx_signature"])
            meta["calibration_source"] = (ctx.calibration_source if ctx and ctx.calibration else "synthesized")
        out.write_bytes(_tf_convert(src.folder, quant, samples, sm_meta["tflite_io"]))
        meta["produced_by"] = "tf.lite.TFLiteConverter.from_saved_model (" + (
            f"{sm_meta.get('produced_by', 'the given')} SavedModel)" if native else "onnx2tf's SavedModel)")
    io = describe_tflite(out, sm_meta["onnx_signature"], native=native)
    _keep_float_layouts(io, sm_meta["tflite_io"])
    meta["tflite_io"] = io
    return Artifact(path=out, format="tflite", sha256="", meta=meta)


def _keep_float_layouts(io: dict, ref: dict) -> None:
    """Variants share the fp32 graph: reuse its (possibly probed) layouts where the shapes agree."""
    for kind, key in (("inputs", "to_tflite"), ("outputs", "to_onnx")):
        for e, r in zip(io[kind], ref[kind]):
            if e["onnx"] == r["onnx"] and e["shape"] == r["shape"]:
                e[key] = r[key]
    io["resolved_by"] = ref.get("resolved_by", io["resolved_by"])


class TfliteFromSavedModel(Converter):
    """Options: ``quant``: ``fp32`` | ``fp16`` (onnx2tf's files) | ``dynint8`` (dynamic-range weights)."""

    input_format = "saved_model"
    output_format = "tflite"
    variants = {"quant": ("fp32", "fp16", "dynint8")}

    def version(self) -> str:
        return _versions()

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        quant = options.get("quant", "fp32")
        if quant not in ("fp32", "fp16", "dynint8"):
            raise ConvertError(f"TfliteFromSavedModel: quant {quant!r} not in fp32|fp16|dynint8 (int8: Int8TfliteFromSavedModel)")
        _require()
        return _pick(src, out_dir, quant, ctx)


class Int8TfliteFromSavedModel(Converter):
    """Full integer quantization (int8 weights, activations, inputs and outputs), calibrated on
    ``ctx.calibration`` (seeded noise when absent; ``meta["calibration"]`` says which)."""

    input_format = "saved_model"
    output_format = "tflite"
    uses_calibration = True
    variants = {"quant": ("int8",)}

    def version(self) -> str:
        return _versions()

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        _require()
        return _pick(src, out_dir, "int8", ctx)
