"""Load and validate an ONNX model file; extract its signature.

Untrusted files are the norm: nothing here executes code from the model, and external-data locations
must resolve to files inside the model's own folder (no absolute paths, no ``..``, no symlink escapes).
Every problem is a ``BadModel`` with a one-line message.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from portability.core.artifact import Artifact, sha256_files
from portability.core.errors import BadModel
from portability.core.random_ops import random_nodes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorSpec:
    """``shape`` entries are ints (fixed), strings (symbolic, e.g. "batch") or None (unknown)."""

    name: str
    dtype: str
    shape: tuple[int | str | None, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, d: dict) -> "TensorSpec":
        return cls(d["name"], d["dtype"], tuple(d["shape"]))


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    sha256: str
    size_bytes: int
    opset: int | None
    producer: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    external_data: tuple[str, ...] = ()
    #: integer inputs used as Gather indices into a table: name -> exclusive upper bound
    index_bounds: dict[str, int] = field(default_factory=dict)
    #: the source's format (``onnx``, ``keras``, ``saved_model``, ``tflite``, ``tfjs``, ``torch``) and the
    #: framework that reads it, with its version (``keras 3.15.1``); see ``portability.sources``
    format: str = "onnx"
    framework: str | None = None
    #: the quantized ops the graph carries (a model quantized already: ``QUANTIZED_OPS``)
    quantized_ops: tuple[str, ...] = ()
    #: the nodes that draw random numbers (``core/random_ops.py``): outputs that change from run to run
    random_ops: tuple[str, ...] = ()
    #: (height, width) the model's metadata gives for its images, and the key that gave it (``image_size``)
    image_size: tuple[int, int] | None = None
    image_size_from: str | None = None
    #: the audio sampling rate (Hz) the model's metadata gives (``sampling_rate``), else None
    sample_rate: int | None = None

    def artifact(self) -> Artifact:
        return Artifact(path=self.path, format=self.format, sha256=self.sha256)

    def signature(self) -> dict[str, list[dict]]:
        """Inputs and outputs as plain dicts (name, dtype, shape with None for any non-fixed dim): what
        converters record in their artifacts (``meta["onnx_signature"]``)."""
        return signature_of(self.inputs, self.outputs)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelInfo":
        return cls(path=Path(d["path"]), sha256=d["sha256"], size_bytes=d["size_bytes"], opset=d["opset"],
                   producer=d["producer"], inputs=tuple(TensorSpec.from_dict(t) for t in d["inputs"]),
                   outputs=tuple(TensorSpec.from_dict(t) for t in d["outputs"]),
                   external_data=tuple(d.get("external_data", ())), index_bounds=dict(d.get("index_bounds") or {}),
                   format=d.get("format", "onnx"), framework=d.get("framework"),
                   quantized_ops=tuple(d.get("quantized_ops") or ()), random_ops=tuple(d.get("random_ops") or ()),
                   image_size=tuple(d["image_size"]) if d.get("image_size") else None,
                   image_size_from=d.get("image_size_from"), sample_rate=d.get("sample_rate"))

    def to_dict(self) -> dict:
        """The report's ``model`` section. ``format`` and ``framework`` are added for sources other than
        ONNX (an ONNX source's section is what it always was)."""
        extra = {} if self.format == "onnx" else {"format": self.format, "framework": self.framework}
        return {**extra,
            "path": str(self.path),
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "opset": self.opset,
            "producer": self.producer,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "external_data": list(self.external_data),
            **({"quantized_ops": list(self.quantized_ops)} if self.quantized_ops else {}),
            **({"random_ops": list(self.random_ops)} if self.random_ops else {}),
        }


def _tensors_with_external_data(model):
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    return [t for t in _get_all_tensors(model) if uses_external_data(t)]


def _location(tensor) -> str:
    for kv in tensor.external_data:
        if kv.key == "location":  # protobuf gives bytes for a string that is not UTF-8
            return kv.value if isinstance(kv.value, str) else kv.value.decode("utf-8", "replace")
    return ""


def confined_location(model_dir: Path, location: str, tensor_name: str = "?") -> Path:
    """The external-data file a location names, refused unless it is a file inside ``model_dir``."""
    if not location:
        raise BadModel(f"tensor '{tensor_name}' uses external data but names no location")
    if "\x00" in location:
        raise BadModel(f"external data path of tensor '{tensor_name}' holds a NUL character: refused")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location.split("/")[0]:
        raise BadModel(f"external data path '{location}' of tensor '{tensor_name}' is absolute: refused (it must lie in the model's folder)")
    parts = location.replace("\\", "/").split("/")
    if ".." in parts:
        raise BadModel(f"external data path '{location}' of tensor '{tensor_name}' leaves the model's folder: refused")
    base = model_dir.resolve()
    try:
        target = (model_dir / location).resolve()
        is_file = target.is_file()
    except OSError as e:  # a name too long for this file system, say
        raise BadModel(f"external data path '{location[:80]}' of tensor '{tensor_name}' cannot name a file here "
                       f"({e.strerror})") from None
    if base != target and base not in target.parents:
        raise BadModel(f"external data path '{location}' of tensor '{tensor_name}' resolves outside the model's folder (symlink?): refused")
    if not is_file:
        raise BadModel(f"external data file '{location}' of tensor '{tensor_name}' is missing next to the model")
    return target


def external_data_files(path: Path) -> list[Path]:
    """The (confined, range-checked) external data files a model file references, without loading them."""
    import onnx

    return _check_external_ranges(onnx.load(str(path), load_external_data=False), path.parent)


def _check_external_ranges(model, model_dir: Path) -> list[Path]:
    files: list[Path] = []
    for t in _tensors_with_external_data(model):
        p = confined_location(model_dir, _location(t), t.name)
        kv = {e.key: e.value for e in t.external_data}
        try:
            offset = int(kv.get("offset", 0) or 0)
            length = int(kv["length"]) if kv.get("length") else None
        except ValueError:
            raise BadModel(f"tensor '{t.name}' has a malformed external data offset/length") from None
        size = p.stat().st_size
        if offset < 0 or offset > size or (length is not None and (length < 0 or offset + length > size)):
            raise BadModel(f"external data of tensor '{t.name}' lies beyond the end of '{_location(t)}' (truncated file?)")
        if p not in files:
            files.append(p)
    return files


def _spec(value_info) -> TensorSpec:
    import onnx

    tt = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        kind = value_info.type.WhichOneof("value")
        raise BadModel(f"'{value_info.name}' is a {kind}, not a tensor: only tensor inputs and outputs are supported")
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name
    except Exception:
        dtype = onnx.TensorProto.DataType.Name(tt.elem_type).lower()
    dims: list[int | str | None] = []
    if tt.HasField("shape"):
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
    return TensorSpec(value_info.name, dtype, tuple(dims))


#: ops that pass an input's values on unchanged (their dtype or layout aside) on its way to a lookup
_PASS_THROUGH = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Flatten"})


def _index_bounds(model, input_names: set[str]) -> dict[str, int]:
    """Integer inputs that index a table (Gather's indices into an initializer, read directly or through
    ``_PASS_THROUGH`` ops): their valid range."""
    inits = {i.name: i for i in model.graph.initializer}
    origin = {n: n for n in input_names}  # tensor -> the input its values are
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in _PASS_THROUGH and node.input and node.input[0] in origin and node.output:
            origin[node.output[0]] = origin[node.input[0]]
        if node.op_type == "Gather" and len(node.input) >= 2 and node.input[1] in origin and node.input[0] in inits:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            dims = list(inits[node.input[0]].dims)
            if dims:
                n, name = dims[axis if axis >= 0 else axis + len(dims)], origin[node.input[1]]
                bounds[name] = min(bounds.get(name, n), n)
    return bounds


def load_model(path: str | os.PathLike) -> ModelInfo:
    """Validate ``path`` fully (checker, shape inference, external data) and describe it. A graph whose
    values are of the wrong kind (protobuf hands over bytes for a name that is not UTF-8) is refused in
    one line like any other malformed model."""
    try:
        return _load_model(path)
    except (TypeError, ValueError, AttributeError, UnicodeError, IndexError, KeyError) as e:
        raise BadModel(f"{Path(path).name}: a malformed ONNX model ({type(e).__name__}: "
                       f"{' '.join(str(e).split())[:200]})") from None


def _load_model(path: str | os.PathLike) -> ModelInfo:
    p = Path(path)
    if not p.exists():
        raise BadModel(f"model file not found: {p}")
    p = p.resolve()  # a symlinked model: its data lies beside the real file
    if p.is_dir():
        raise BadModel(f"{p} is a folder; give the .onnx file")
    import onnx
    from google.protobuf.message import DecodeError

    try:
        raw = p.read_bytes()
    except OSError as e:
        raise BadModel(f"cannot read {p}: {e.strerror}") from None
    if not raw:
        raise BadModel(f"{p} is empty")
    try:
        model = onnx.load_model_from_string(raw)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise BadModel(f"{p} is not a valid ONNX file (protobuf parse failed: {str(e).splitlines()[0] if str(e) else 'truncated or corrupt'})") from None
    if model.ir_version == 0 or not model.HasField("graph"):
        raise BadModel(f"{p} is not an ONNX model (no IR version or no graph)")
    files = _check_external_ranges(model, p.parent)
    latest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and not 1 <= o.version <= latest:
            raise BadModel(f"unknown ONNX opset {o.version} (this onnx {onnx.__version__} knows 1..{latest})")

    try:
        onnx.checker.check_model(str(p), full_check=True)
    except onnx.checker.ValidationError as e:
        raise BadModel(f"invalid ONNX model: {_first_line(e)}") from None
    except onnx.shape_inference.InferenceError as e:
        raise BadModel(f"invalid ONNX model (shape inference): {_first_line(e)}") from None
    except Exception as e:  # checker raises a few other types on broken files (e.g. unknown opset)
        raise BadModel(f"invalid ONNX model: {_first_line(e)}") from None

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    init_names = {i.name for i in model.graph.initializer}
    inputs = tuple(_spec(vi) for vi in model.graph.input if vi.name not in init_names)
    outputs = tuple(_spec(vi) for vi in model.graph.output)
    if not outputs:
        raise BadModel("the model's graph has no outputs")
    if not inputs:
        raise BadModel("the model's graph has no inputs: there is nothing to feed it")
    producer = " ".join(x for x in (model.producer_name, model.producer_version) if x) or "unknown"
    digest = sha256_files([p] + files)
    return ModelInfo(
        path=p,
        sha256=digest,
        size_bytes=p.stat().st_size + sum(f.stat().st_size for f in files),
        opset=opset,
        producer=producer,
        inputs=inputs,
        outputs=outputs,
        external_data=tuple(str(f.relative_to(p.parent)) for f in files),
        index_bounds=_index_bounds(model, {i.name for i in inputs}),
        quantized_ops=quantized_ops(model.graph),
        random_ops=random_nodes(model),
        **dict(zip(("image_size", "image_size_from"), image_size(model))),
        sample_rate=sample_rate(model),
    )


#: ops that compute in integers: a model that carries them is quantized already ("dynamic": its activations
#: are quantized at run time; "static": scales fixed in the graph, QDQ or QLinear)
QUANTIZED_OPS = {
    "dynamic": frozenset({"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM",
                          "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}),
    "static": frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QLinearAdd",
                         "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QLinearAveragePool",
                         "QLinearGlobalAveragePool", "QLinearSoftmax", "QLinearReduceMean", "QLinearWhere", "QGemm",
                         "QAttention", "MatMulNBits"}),
}


def quantized_ops(graph) -> tuple[str, ...]:
    """The quantized op types of a graph and its subgraphs, sorted."""
    every = QUANTIZED_OPS["dynamic"] | QUANTIZED_OPS["static"]
    found: set[str] = set()
    todo = [graph]
    while todo:
        g = todo.pop()
        for n in g.node:
            if n.op_type in every:
                found.add(n.op_type)
            todo += [a.g for a in n.attribute if a.HasField("g")] + [x for a in n.attribute for x in a.graphs]
    return tuple(sorted(found))


#: metadata keys exporters write an image size under (Ultralytics: ``imgsz``)
IMAGE_SIZE_KEYS = ("imgsz", "image_size", "img_size", "input_size", "image_shape", "input_shape")


def image_size(model) -> tuple[tuple[int, int] | None, str | None]:
    """((height, width), the metadata key) an exporter recorded for the model's images, else (None, None)."""
    import re

    props = {p.key.lower(): p.value for p in model.metadata_props}
    for key in IMAGE_SIZE_KEYS:
        nums = [int(n) for n in re.findall(r"\d+", props.get(key, ""))]
        if len(nums) in (1, 2, 3, 4) and all(8 <= n <= 8192 for n in nums[-2:]):
            hw = (nums[0], nums[0]) if len(nums) == 1 else tuple(nums[-2:]) if len(nums) in (2, 4) else None
            if hw:
                return hw, key
    return None, None


def sample_rate(model) -> int | None:
    """The audio sampling rate (Hz) an exporter recorded in the model's metadata, else None."""
    props = {p.key.lower(): p.value.strip() for p in model.metadata_props}
    rate = next((props[k] for k in ("sampling_rate", "sample_rate") if props.get(k, "").isdigit()), None)
    return int(rate) if rate and 1000 <= int(rate) <= 384000 else None


def quantization(ops: tuple[str, ...]) -> str | None:
    """``static``, ``dynamic`` or None: how a model carrying ``ops`` was quantized (static wins)."""
    if set(ops) & QUANTIZED_OPS["static"]:
        return "static"
    return "dynamic" if ops else None


def signature_of(inputs, outputs) -> dict[str, list[dict]]:
    conv = lambda specs: [{"name": t.name, "dtype": t.dtype,  # noqa: E731
                           "shape": [d if isinstance(d, int) else None for d in t.shape]} for t in specs]
    return {"inputs": conv(inputs), "outputs": conv(outputs)}


def read_signature(path: str | os.PathLike) -> dict[str, list[dict]]:
    """The signature of an ONNX file already validated (a converter's own intermediate copy): read from
    the graph's inputs and outputs, without the checker."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    return signature_of([_spec(v) for v in model.graph.input if v.name not in inits],
                        [_spec(v) for v in model.graph.output])


def _first_line(e: Exception) -> str:
    s = str(e).strip()
    lines = [ln.strip() for ln in s.splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


if __name__ == "__main__":
    import json
    import sys

    try:
        info = load_model(sys.argv[1])
        print(json.dumps(dict(info.to_dict(), index_bounds=info.index_bounds, image_size=info.image_size,
                              image_size_from=info.image_size_from, sample_rate=info.sample_rate)))
    except BadModel as e:
        print(json.dumps({"error": str(e)}))
