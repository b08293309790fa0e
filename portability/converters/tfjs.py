"""TfjsFromSavedModel: a TensorFlow SavedModel -> a TF.js **graph** model (``model.json`` + weight shards).

The ``tensorflowjs`` converter unconditionally imports ``tensorflow_decision_forests``,
``tensorflow_hub`` and JAX; its declared dependencies would downgrade TensorFlow and protobuf. It runs
in a subprocess with empty stand-ins for those modules (none is used on the SavedModel path), never
the network. Keras-3 "layers" models do not load in TF.js, hence graph models only.

Outputs keep their SavedModel signature keys (``--use_structured_outputs_names``), so the runtime can
map them back to ONNX names. ``meta["tfjs_io"]`` carries that mapping (see ``tfjs_io``) plus the
SavedModel's layout permutations (NHWC inputs from onnx2tf), ``meta["ops"]`` the TF ops in the graph.

Options: ``quantize``: ``None`` (float32 weights) | ``float16`` | ``uint8`` | ``uint16`` (weight storage).
"""
from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version, run_tool, require
from portability.converters.onnx2tf import plain_saved_model
from portability.converters.tflite_layout import layout_notes
from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import ConvertError

QUANTIZE = {None: [], "float16": ["--quantize_float16=*"], "uint8": ["--quantize_uint8=*"], "uint16": ["--quantize_uint16=*"]}

#: runs the tensorflowjs converter with stand-ins for the modules it imports but never uses here
_BOOT = """
import sys, types
for name in ("tensorflow_decision_forests", "tensorflow_hub", "tensorflowjs.converters.jax_conversion"):
    sys.modules[name] = types.ModuleType(name)
def _no_jax(*a, **k):
    raise RuntimeError("JAX conversion is not available in portability's tensorflowjs shim")
sys.modules["tensorflowjs.converters.jax_conversion"].convert_jax = _no_jax
from tensorflowjs.converters import converter
sys.argv = ["tensorflowjs_converter"] + sys.argv[1:]
converter.pip_main()
"""


_NEEDS = {"tensorflow": install("tensorflow"), "tensorflowjs": install("tfjs"), "tf_keras": install("tfjs")}


#: what the converter's process says that is no part of its failure (TensorFlow's start-up, a font library's
#: missing configuration on a machine without fonts)
_NOISE = ("I0000", "W0000", "WARNING: All log messages", "Fontconfig ")


def _failure_lines(log: str, limit: int = 8) -> list[str]:
    """The converter's own explanation: the unsupported ops first, then its error lines, noise left out."""
    lines = [ln.rstrip() for ln in log.splitlines() if ln.strip() and not ln.lstrip().startswith(_NOISE)]
    at = [i for i, ln in enumerate(lines) if "Unsupported" in ln or "not supported" in ln]
    ops = [lines[j] for i in at for j in (i, i + 1) if j < len(lines)]  # the ops follow on the next line
    errors = [ln for ln in lines if ("Error" in ln or "error:" in ln) and ln not in ops]
    return (ops + errors)[:limit] if ops else (errors or lines)[-limit:]


def unsupported_ops(log: str) -> list[str]:
    """The ops the converter refused: the line after its "Unsupported Ops in the model ..." (``Erfc, Foo``)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.lstrip().startswith(_NOISE)]
    for i, ln in enumerate(lines[:-1]):
        if re.match(r"^\w*Error: Unsupported Ops in the model", ln):
            return [o.strip() for o in lines[i + 1].split(",") if re.fullmatch(r"[A-Za-z_][\w.]*", o.strip())]
    return []


def tfjs_io(model_json: dict, saved_model_meta: dict) -> dict[str, Any]:
    """ONNX name <-> TF.js signature key, with the layouts onnx2tf chose.

    ``{"inputs": [{"onnx", "key", "dtype", "shape", "to_tfjs"}], "outputs": [{"onnx", "key", "to_onnx"}]}``.
    Keys come from the SavedModel signature recorded by the onnx2tf step (``tflite_io``: the SavedModel
    has the fp32 TFLite file's tensors and layouts); when a key is missing, position decides."""
    sig = model_json.get("signature") or {}
    in_keys = list((sig.get("inputs") or {}).keys())
    structured = (model_json.get("userDefinedMetadata") or {}).get("structuredOutputKeys")
    out_keys = list(structured or (sig.get("outputs") or {}).keys())
    ref = saved_model_meta.get("tflite_io") or {}
    onnx_sig = saved_model_meta.get("onnx_signature") or {}

    ins, outs = ref.get("inputs") or [], ref.get("outputs") or []
    onnx_in = [t["name"] for t in onnx_sig.get("inputs", [])] or [e["onnx"] for e in ins]
    onnx_out = [t["name"] for t in onnx_sig.get("outputs", [])] or [e["onnx"] for e in outs]
    by_onnx_in = {e["onnx"]: e for e in ins}
    by_onnx_out = {e["onnx"]: e for e in outs}
    io: dict[str, Any] = {"inputs": [], "outputs": []}
    for i, name in enumerate(onnx_in):
        e = by_onnx_in.get(name, {})
        key = _key(e.get("key"), in_keys, i, "inputs", onnx=name)
        shape = [int(d.get("size", -1)) for d in (sig["inputs"][key].get("tensorShape") or {}).get("dim", [])]
        io["inputs"].append({"onnx": name, "key": key, "node": sig["inputs"][key]["name"].split(":")[0],
                             "shape": shape, "dtype": _dtype(sig["inputs"][key].get("dtype")),
                             "to_tfjs": e.get("to_tflite")})
    nodes = {n.get("name") for n in (model_json.get("modelTopology") or {}).get("node") or []}
    for i, name in enumerate(onnx_out):
        e = by_onnx_out.get(name, {})
        # onnx2tf keys the SavedModel's outputs output_<position in the ONNX model> (a named key where it kept one)
        wanted = e.get("key") if e.get("key") in out_keys else f"output_{i}" if f"output_{i}" in out_keys else e.get("key")
        key = _key(wanted, out_keys, i, "outputs")
        io["outputs"].append({"onnx": name, "key": key, "node": _node(key, out_keys, sig, nodes),
                              "to_onnx": e.get("to_onnx")})
    return io


def _node(key: str, keys: list[str], sig: dict, nodes: set) -> str | None:
    """The TF.js graph node that holds the output ``key``. The converter freezes the SavedModel's function,
    whose outputs TensorFlow flattens in the order of their keys, sorted: the k-th becomes the node
    ``Identity_k`` (``Identity`` for the first). Else the node the signature names for the key."""
    k = sorted(keys).index(key)
    node = f"Identity_{k}" if k else "Identity"
    if node in nodes and all((f"Identity_{j}" if j else "Identity") in nodes for j in range(len(keys))):
        return node
    named = ((sig.get("outputs") or {}).get(key) or {}).get("name")
    return named.split(":")[0] if named else None


def _key(wanted: str | None, keys: list[str], i: int, kind: str, onnx: str | None = None) -> str:
    """The model.json's signature key of the SavedModel's ``wanted`` (the converter may write ``input_ids:0``
    for ``input_ids``, and orders keys its own way), else of a spelling of the ONNX name ``onnx``
    (``past_key_values.0.key`` is keyed ``past_key_values_0_key``); by position only when no key names it."""
    from portability.converters.tflite_layout import _sanitized

    for want in [wanted] + (sorted(_sanitized(onnx)) if onnx else []):
        named = [k for k in keys if k == want or k.split(":")[0] == want]
        if want and named:
            return named[0]
    if i < len(keys):
        return keys[i]
    raise ConvertError(f"the TF.js model has {len(keys)} signature {kind}, fewer than the ONNX model")


def _dtype(tf_dtype: str | None) -> str:
    # TF.js has float32, int32 and bool tensors: int64 becomes int32, float64/16 become float32
    return {"DT_INT32": "int32", "DT_INT64": "int32", "DT_BOOL": "bool"}.get(tf_dtype or "", "float32")


class TfjsFromSavedModel(Converter):
    input_format = "saved_model"
    output_format = "tfjs"
    uses = ("tensorflowjs",)
    requires = _NEEDS
    pool = "tfjs"  # TensorFlow imported as the converter runs it (oneDNN's rewrites off): its run is forked from there

    def version(self) -> str:
        return f"10+tensorflowjs{package_version('tensorflowjs')}+tf{package_version('tensorflow-cpu')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        require(self.requires, "to convert to TF.js")
        quantize = options.get("quantize")
        if quantize not in QUANTIZE:
            raise ConvertError(f"TfjsFromSavedModel: quantize {quantize!r} not in {list(QUANTIZE)}")
        with tempfile.TemporaryDirectory(prefix="portability-tfjs-") as tmp:
            sm = plain_saved_model(src, Path(tmp) / "saved_model", ctx)
            cmd = [sys.executable, "-c", _BOOT, "--input_format=tf_saved_model", "--output_format=tfjs_graph_model",
                   "--signature_name=serving_default", "--saved_model_tags=serve", "--use_structured_outputs_names=true",
                   *QUANTIZE[quantize], str(sm.folder), str(out_dir)]
            # oneDNN's graph rewrites (a LayerNorm fused into _MklLayerNorm on x86) make ops no TF.js backend has
            p = run_tool(cmd, "tensorflowjs converter", ctx.timeout_s, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1",
                         TF_ENABLE_ONEDNN_OPTS="0")
        model = out_dir / "model.json"
        if p.returncode != 0 or not model.is_file():
            ops = unsupported_ops(p.stdout)
            if ops:
                raise ConvertError(f"tensorflowjs converter failed (exit {p.returncode}): TF.js has no {', '.join(ops)} "
                                   "(Unsupported Ops in the model)", op=ops[0])
            raise ConvertError(f"tensorflowjs converter failed (exit {p.returncode}): " + " | ".join(_failure_lines(p.stdout)))
        doc = json.loads(model.read_text())
        ops = sorted({n["op"] for n in doc["modelTopology"].get("node", [])} - {"Const", "Placeholder", "Identity"})
        return Artifact(path=model, format="tfjs", sha256="", meta={
            "onnx_signature": src.meta.get("onnx_signature"),
            "tfjs_io": tfjs_io(doc, sm.meta),
            "ops": ops,
            "weights_quantization": quantize,
            "converted_by": doc.get("convertedBy"),
            "notes": layout_notes(sm.meta.get("tflite_io") or {}, "the SavedModel this model is converted from")
            + (["converted from onnx2tf's SavedModel of the model as given: the exact GELUs fused for TFLite become "
                "an Erfc in TensorFlow, which TF.js lacks"] if src.meta.get("unfused") else []),
        })
