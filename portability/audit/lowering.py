"""The IR version and opsets the reference runtime reads, and a conformance case converted down to them.

The installed onnx stamps each node test case with its own newest IR version and opset, which may be newer
than the installed ONNX Runtime reads: ONNX Runtime refuses such a model before it looks at its op. What it
reads is found by asking it (:func:`limits`: a one-node model stamped with onnx's newest versions is loaded,
and each refusal names the newest version it does read). A case stamped newer is converted down
(:func:`lower`): its default-domain opset with onnx's version converter, its IR version set to the newest
read where nothing in it needs a newer one (the opsets it imports, the element types it uses). The case's
inputs and expected outputs are its spec and stay as they are; the converted model must load in ONNX Runtime.
"""
from __future__ import annotations

import functools
import logging
import re

log = logging.getLogger(__name__)

#: element types and the IR version that brought each (older ones every reader has)
_TYPE_IR = {"FLOAT8E4M3FN": 9, "FLOAT8E4M3FNUZ": 9, "FLOAT8E5M2": 9, "FLOAT8E5M2FNUZ": 9, "UINT4": 10, "INT4": 10,
            "FLOAT4E2M1": 11, "FLOAT8E8M0": 12, "UINT2": 13, "INT2": 13, "FLOAT6E2M3": 14, "FLOAT6E3M2": 14}


class Unreadable(Exception):
    """A case that cannot be brought to versions the reference runtime reads; the message says why."""


@functools.lru_cache(maxsize=1)
def limits() -> dict | None:
    """``{"reader", "ir_version", "opset"}``: the installed ONNX Runtime and the newest IR version and
    default-domain opset it loads; None where ONNX Runtime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    import onnx
    from onnx import helper

    ir, opset = onnx.IR_VERSION, onnx.defs.onnx_opset_version()
    for _ in range(2 * (ir + opset)):
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe",
                                  [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = ir
        try:
            _session(ort, model)
            return {"reader": f"onnxruntime {ort.__version__}", "ir_version": ir, "opset": opset}
        except Exception as e:  # noqa: BLE001 - its refusal names what it reads
            msg = str(e)
        said_ir = re.search(r"max supported IR version: (\d+)", msg)
        said_opset = re.search(r"domain ai\.onnx is till opset (\d+)", msg)
        if said_ir or "IR version" in msg:
            ir = min(int(said_ir.group(1)), ir - 1) if said_ir else ir - 1
        elif said_opset or re.search(r"[Oo]pset \d+", msg):
            opset = min(int(said_opset.group(1)), opset - 1) if said_opset else opset - 1
        else:
            break
    log.warning("could not find the IR version and opset the installed ONNX Runtime reads: %s", msg)
    return None


def _session(ort, model):
    """An ONNX Runtime session of the model on the CPU, its warnings quiet (they are not refusals)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _opset(model) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def versions(model) -> dict:
    return {"ir_version": model.ir_version, "opset": _opset(model)}


def newer(model, reads: dict) -> bool:
    """Whether the model is stamped newer than the reader reads."""
    op = _opset(model)
    return model.ir_version > reads["ir_version"] or (op is not None and op > reads["opset"])


def _types(graph, found: set[int]) -> None:
    """The element types a graph (and its subgraphs) declares, holds or casts to."""
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.type.HasField("tensor_type"):
            found.add(v.type.tensor_type.elem_type)
    found.update(t.data_type for t in graph.initializer)
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                found.add(a.t.data_type)
            if a.name == "to" and a.type == a.INT:
                found.add(a.i)
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _types(g, found)


def _needs_ir(model) -> int:
    """The oldest IR version the model can be stamped with: that of its opsets and its element types."""
    import onnx
    from onnx import helper

    found: set[int] = set()
    _types(model.graph, found)
    by_type = [ir for name, ir in _TYPE_IR.items() if getattr(onnx.TensorProto, name, None) in found]
    return max([helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True), *by_type])


def _said(e: Exception) -> str:
    """An error's message without the source location and assertion text around it."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    msg = msg.split("` failed: ", 1)[-1]
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", msg)


def lower(model, reads: dict):
    """``(model, {"from": versions, "to": versions})``: the model converted down to what the reader reads
    (a new model; the given one is left as it is). Raises :class:`Unreadable` with the reason where it
    cannot be, or where ONNX Runtime still refuses the converted model."""
    import onnx

    before = versions(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if before["opset"] is not None and before["opset"] > reads["opset"]:
        from onnx import version_converter

        try:
            out = version_converter.convert_version(out, reads["opset"])
        except Exception as e:  # noqa: BLE001 - the converter's assertions are plain RuntimeErrors
            raise Unreadable(f"onnx's version converter cannot take it from opset {before['opset']} to "
                             f"{reads['opset']}: {_said(e)}") from None
    if out.ir_version > reads["ir_version"] or model.ir_version > reads["ir_version"]:
        need = _needs_ir(out)
        if need > reads["ir_version"]:
            raise Unreadable(f"it needs IR version {need}, {reads['reader']} reads up to {reads['ir_version']}")
        out.ir_version = reads["ir_version"]
    import onnxruntime as ort

    try:
        _session(ort, out)
    except Exception as e:  # noqa: BLE001 - ONNX Runtime's refusal is the reason
        raise Unreadable(f"converted to IR {out.ir_version}, opset {_opset(out)}, {reads['reader']} still "
                         f"refuses it: {_said(e)}") from None
    return out, {"from": before, "to": versions(out)}
