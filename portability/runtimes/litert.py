"""LiteRT (ai-edge-litert, formerly TFLite) in this Python process: the mobile CPU runtime.

Options: ``kernels``: ``xnnpack`` (default, what phones use) | ``builtin`` (optimized built-in kernels,
no delegate) | ``reference`` (reference kernels); ``threads`` (default 4, a phone's big cores, capped to
this machine's cores).

The ``.tflite`` file speaks its own names and layouts; the converter recorded the mapping in
``artifact.meta["tflite_io"]`` (see ``portability.converters.tflite_layout``). ``to_tflite`` and
``from_tflite`` apply it — transposition, quantization of full-int8 inputs, dequantization of outputs —
and are shared with the emulated ARM64 runtime. Runs use the tensor interface (some files have no
signature), one interpreter call per batch the file accepts.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import LoadError, RunError
from portability.core.protocol import IoMap
from portability.runtimes.base import Availability, Runtime, modules_present, output_dtypes, placement, time_calls

KERNELS = {"xnnpack": "AUTO", "builtin": "BUILTIN_WITHOUT_DEFAULT_DELEGATES", "reference": "BUILTIN_REF"}


def default_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def tflite_io(artifact: Artifact) -> IoMap:
    io = artifact.meta.get("tflite_io")
    if not io:
        raise LoadError(f"{artifact.path.name}: no ONNX <-> TFLite tensor mapping in the artifact's metadata "
                        "(was it produced by portability's TFLite converters?)")
    return IoMap.from_dict(io)


def _quantize(x: np.ndarray, q: dict, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.round(x / q["scale"]) + q["zero_point"], info.min, info.max).astype(dtype)


def to_tflite(io: IoMap, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX-layout feeds -> one array per interpreter input (order of ``io.inputs``)."""
    arrays = []
    for e in io.inputs:
        x = np.asarray(feeds[e.onnx])
        if e.perm is not None:
            x = x.transpose(e.perm)
        elif x.ndim == 0:  # a scalar input: the file holds it as [] (or [1])
            x = x.reshape([max(d, 1) for d in e.shape])
        else:
            x = x.reshape([len(x)] + list(e.shape[1:]))
        x = _quantize(x.astype(np.float32), e.quant, e.dtype) if e.quant else x.astype(e.dtype)
        arrays.append(np.ascontiguousarray(x))
    return arrays


def from_tflite(io: IoMap, raw: list[np.ndarray], onnx_dtypes: dict[str, str]) -> dict[str, np.ndarray]:
    """Interpreter outputs (order of ``io.outputs``) -> ONNX-layout outputs keyed by ONNX names."""
    out = {}
    for e, y in zip(io.outputs, raw):
        if e.quant:
            y = (y.astype(np.float32) - e.quant["zero_point"]) * np.float32(e.quant["scale"])
        y = y.transpose(e.perm) if e.perm is not None else y
        out[e.onnx] = y.astype(onnx_dtypes.get(e.onnx, y.dtype), copy=False)
    return out


def batches(io: IoMap, arrays: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Split along the batch axis when the file's batch size is fixed and the feeds' differs."""
    fixed = [e.shape[0] for e in io.inputs if e.shape and e.shape[0] > 0]
    n = len(arrays[0]) if arrays and arrays[0].ndim else 1
    b = fixed[0] if fixed else n
    if b == n or b <= 0 or n % b:
        return [arrays]
    return [[a[i:i + b] if a.ndim else a for a in arrays] for i in range(0, n, b)]


def layout_details(io: IoMap) -> dict[str, Any]:
    """The mapping, for the report: ONNX name -> TFLite tensor, shape and permutation."""
    d: dict[str, Any] = {"resolved_by": io.resolved_by, "signature": io.signature}
    for kind, key in (("inputs", "to_tflite"), ("outputs", "to_onnx")):
        d[kind] = {e.onnx: {"tensor": e.tensor, "shape": list(e.shape), "dtype": e.dtype,
                            key: list(e.perm) if e.perm is not None else None} for e in getattr(io, kind)}
    return d


def quant_details(io: IoMap) -> dict[str, Any]:
    d = {}
    inq = {e.onnx: e.quant for e in io.inputs if e.quant}
    outq = {e.onnx: e.quant for e in io.outputs if e.quant}
    if inq:
        d["input_quant"] = inq
    if outq:
        d["output_quant"] = outq
    return d


def custom_ops(path) -> list[str]:
    """The custom op codes a ``.tflite`` file's operators use (``FlexErf``: a TensorFlow op), read from its
    flatbuffer without loading it; [] for a file that cannot be read (its runtime then says why)."""
    try:
        from ai_edge_litert import schema_py_generated as fb

        model = fb.Model.GetRootAs(Path(path).read_bytes(), 0)
        codes = {model.OperatorCodes(i).CustomCode() for i in range(model.OperatorCodesLength())}
    except Exception:  # noqa: BLE001 - a truncated or foreign file: not ours to judge here
        return []
    return sorted(c.decode("utf-8", "replace") for c in codes if c)


def litert_error(e: Exception, cls=LoadError):
    """A LiteRT exception as a typed error naming the unsupported op (``FlexErf``, custom ops)."""
    msg = " ".join(ln.strip() for ln in str(e).splitlines() if ln.strip()) or type(e).__name__
    m = re.search(r"\b(Flex\w+)", msg) or re.search(r"custom op:? '?(\w+)", msg) \
        or re.search(r"Didn't find op for builtin opcode '(\w+)'", msg) or re.search(r"op '?(\w+)'? .*not supported", msg)
    op = m.group(1) if m else None
    if op and op.startswith("Flex"):
        msg = f"{op} is a TensorFlow (Flex) op that LiteRT's built-in op set cannot run: {msg}"
    return cls(msg[:600], op=op)


def delegated(ops: list[dict], backend: str) -> dict[str, Any]:
    """The placement of an interpreter's nodes (``_get_ops_details()`` after ``allocate_tensors``): a delegate's
    kernel is an extra ``DELEGATE`` node whose inputs and outputs bound its partition; the original nodes it
    replaced are those met walking back from its outputs through their producers to its inputs. The other
    original nodes run on the built-in kernels."""
    nodes = {d["index"]: d for d in ops if d["op_name"] != "DELEGATE"}
    producer = {int(t): i for i, d in nodes.items() for t in d["outputs"]}
    taken: set[int] = set()
    for dg in (d for d in ops if d["op_name"] == "DELEGATE"):
        bounds = {int(t) for t in dg["inputs"]}
        todo = [int(t) for t in dg["outputs"]]
        while todo:
            t = todo.pop()
            i = producer.get(t)
            if t in bounds or i is None or i in taken:
                continue
            taken.add(i)
            todo += [int(x) for x in nodes[i]["inputs"] if x >= 0]
    return placement(backend, [(d["op_name"], i in taken) for i, d in sorted(nodes.items())])


class TfliteMapped:
    """What the in-process and the emulated LiteRT runtimes share: the artifact's mapping, the kernels
    option and the ONNX output dtypes, and the quantization of its outputs."""

    options: dict[str, Any]
    #: the engine that runs the file on a device (``mobile/device_engines.py``): a mobile bundle's, the emulator's
    device_engine: ClassVar[str] = "litert"

    @classmethod
    def device_tensors(cls, artifact: Artifact, ref: dict, feeds: list[dict], options: dict[str, Any],
                       outputs: list[str]) -> tuple[dict, dict[str, np.ndarray]]:
        """A device's copy of a check, for its engine: the tensors (interpreter indices, the file's layout: each
        batch's calls, each output's reference keys) and the arrays they name (``ref``: the reference's outputs,
        ONNX names and layout, per batch; ``feeds``: each batch's inputs)."""
        io = tflite_io(artifact)
        kernels = options.get("kernels", "xnnpack")
        if kernels not in KERNELS:
            raise LoadError(f"unknown LiteRT kernels {kernels!r} (one of {', '.join(KERNELS)})")
        arrays: dict[str, np.ndarray] = {}
        calls = []
        for b, batch in enumerate(feeds):
            row = []
            for s, part in enumerate(batches(io, to_tflite(io, batch))):
                row.append([f"feed_{b}_{s}_{i}" for i in range(len(part))])
                arrays.update(zip(row[-1], part))
            calls.append(row)
        outs = []
        for j, e in enumerate(io.outputs):
            inv = np.argsort(e.perm) if e.perm is not None else None
            keys = []
            for b in range(len(feeds)):
                r = np.asarray(ref[e.onnx][b])
                arrays[f"ref_{b}_{j}"] = np.ascontiguousarray(r.transpose(inv) if inv is not None else r)
                keys.append(f"ref_{b}_{j}")
                if not e.quant:  # the file's layout maps back to the reference exactly as the check maps outputs
                    back = from_tflite(IoMap((), (e,)), [arrays[keys[-1]]], {})[e.onnx]
                    if not np.array_equal(back.astype(r.dtype), r):
                        raise LoadError(f"output '{e.onnx}': the file's layout of the reference does not map back to it")
            outs.append({"onnx": e.onnx, "index": e.index, "tensor": e.tensor, "quant": e.quant, "ref": keys})
        tensors = {"inputs": [{"index": e.index, "tensor": e.tensor, "onnx": e.onnx, "dtype": e.dtype} for e in io.inputs],
                   "outputs": outs, "calls": calls, "kernels": kernels}
        return tensors, arrays

    def _open_mapping(self, artifact: Artifact) -> None:
        self.io = tflite_io(artifact)
        self.meta = artifact.meta
        self.kernels = self.options.get("kernels", "xnnpack")
        if self.kernels not in KERNELS:
            raise LoadError(f"unknown LiteRT kernels {self.kernels!r} (one of {', '.join(KERNELS)})")
        self._dtypes = output_dtypes(artifact)

    def output_quant(self) -> dict[str, dict] | None:
        return quant_details(self.io).get("output_quant")


class LiteRt(TfliteMapped, Runtime):
    input_format = "tflite"
    uses = ("ai-edge-litert",)
    OPTIONS = frozenset({"kernels", "threads"})
    reference_kernels = {"kernels": "reference"}

    @classmethod
    def availability(cls) -> Availability:
        return modules_present("ai_edge_litert", hint=install("mobile"))

    def load(self, artifact: Artifact) -> None:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        self._open_mapping(artifact)
        self.threads = int(self.options.get("threads") or default_threads())
        try:
            self.it = Interpreter(model_path=str(artifact.path), num_threads=self.threads,
                                  experimental_op_resolver_type=getattr(OpResolverType, KERNELS[self.kernels]))
            self.it.allocate_tensors()
        except Exception as e:
            raise litert_error(e) from None
        self._shape = {e.index: list(self.it.get_tensor(e.index).shape) for e in self.io.inputs}
        self.placement = None
        if self.kernels == "xnnpack":  # AUTO: the built-in kernels, and XNNPACK for the nodes it takes
            try:
                self.placement = delegated(self.it._get_ops_details(), "XNNPACK")
            except (AttributeError, KeyError, TypeError, ValueError):  # an interpreter without the op list
                pass

    def describe(self) -> str:
        from importlib.metadata import version

        return f"ai-edge-litert {version('ai-edge-litert')} ({self.kernels}, {self.threads} threads)"

    def details(self) -> dict[str, Any]:
        d = {"kernels": self.kernels, "threads": self.threads, "quant": self.meta.get("quant"),
             "layout": layout_details(self.io), **quant_details(self.io),
             **({"placement": self.placement} if self.placement else {})}
        for k in ("calibration", "produced_by"):
            if k in self.meta:
                d[k] = self.meta[k]
        return d

    def _run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        it = self.it
        resized = False
        for e, x in zip(self.io.inputs, arrays):
            if self._shape[e.index] != list(x.shape):
                it.resize_tensor_input(e.index, list(x.shape))
                self._shape[e.index] = list(x.shape)
                resized = True
        if resized:
            it.allocate_tensors()
        for e, x in zip(self.io.inputs, arrays):
            it.set_tensor(e.index, x)
        it.invoke()
        return [it.get_tensor(e.index) for e in self.io.outputs]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            parts = [self._run(b) for b in batches(self.io, to_tflite(self.io, feeds))]
        except Exception as e:
            raise litert_error(e, RunError) from None
        raw = [np.concatenate(ys) if len(parts) > 1 else ys[0] for ys in zip(*parts)]
        return from_tflite(self.io, raw, self._dtypes)

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        """Per call: set the prepared inputs, invoke, read the outputs (what an app does per frame)."""
        arrays = batches(self.io, to_tflite(self.io, feeds))[0]
        return time_calls(self._run, (arrays,), warmup, runs)

    def close(self) -> None:
        self.it = None
