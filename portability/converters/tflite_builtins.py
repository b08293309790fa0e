"""Ops that onnx2tf would leave to TensorFlow (Flex ops, which LiteRT and LiteRT.js cannot run), made
from TFLite's built-ins before it runs.

The exact GELU, ``x · ½ (1 + erf(x / √2))``, is found in the ONNX graph and made one node.

PyTorch exports ``nn.GELU()`` as five nodes (``Div`` by √2 or ``Mul`` by 1/√2, ``Erf``, ``Add`` 1, and two
``Mul`` — by ``x`` and by ½, in either order). onnx2tf turns that ``Erf`` into TensorFlow's ``Erf``, which the
TFLite converter keeps as a Flex op that LiteRT and LiteRT.js cannot run; its own replacement (``-rtpo Erf``)
builds erf from a polynomial whose division fails in the int8 kernels. One ``Gelu`` node (ONNX's, from opset 20:
a model of an older opset is first converted to it, as ONNX's version converter does; onnx2tf runs the model
in ONNX Runtime on the way, so the node must be one every runtime knows) becomes
``tf.nn.gelu(approximate=False)``: TFLite's built-in ``GELU``, in float and in int8.

Int64 inputs (token ids) are taken as int32, cast to int64 inside (``int32_inputs``): LiteRT.js has no int64
tensors. ``for_tflite`` does all of it and says what it did.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

#: the opset that has Gelu
GELU_OPSET = 20
_SQRT2 = float(np.sqrt(2.0))


def _consts(g) -> dict[str, np.ndarray]:
    """The graph's one-element constants (initializers and Constant nodes); weights are never read."""
    from onnx import TensorProto, numpy_helper

    def scalar(t) -> bool:
        return int(np.prod(t.dims)) <= 1 and t.data_location != TensorProto.EXTERNAL

    out = {i.name: numpy_helper.to_array(i) for i in g.initializer if scalar(i)}
    for n in g.node:
        if n.op_type == "Constant" and len(n.output) == 1:
            for a in n.attribute:
                if a.name == "value" and scalar(a.t):
                    out[n.output[0]] = numpy_helper.to_array(a.t)
    return out


def _scalar(consts: dict, name: str, value: float) -> bool:
    v = consts.get(name)
    return v is not None and v.size == 1 and v.dtype.kind == "f" and abs(float(v.reshape(())) - value) <= 1e-6 * abs(value)


def _other(node, name: str) -> str | None:
    """The input of a two-input node that is not ``name``."""
    ins = list(node.input)
    if len(ins) != 2 or name not in ins:
        return None
    return ins[1] if ins[0] == name else ins[0]


def find(model) -> list[tuple[str, list, str]]:
    """Every exact GELU of ``model``'s main graph as ``(x, the nodes it replaces, its output)``."""
    g = model.graph
    consts = _consts(g)
    producer = {o: n for n in g.node for o in n.output}
    users: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}

    def only_user(name: str):
        u = users.get(name, [])
        return u[0] if len(u) == 1 and name not in outputs else None

    found = []
    for erf in (n for n in g.node if n.op_type == "Erf"):
        scale = producer.get(erf.input[0])
        if scale is None or only_user(scale.output[0]) is not erf or len(scale.input) != 2:
            continue
        a, b = scale.input
        if scale.op_type == "Div" and _scalar(consts, b, _SQRT2) or scale.op_type == "Mul" and _scalar(consts, b, 1 / _SQRT2):
            x = a
        elif scale.op_type == "Mul" and _scalar(consts, a, 1 / _SQRT2):
            x = b
        else:
            continue
        add = only_user(erf.output[0])
        if add is None or add.op_type != "Add" or not _scalar(consts, _other(add, erf.output[0]) or "", 1.0):
            continue
        first = only_user(add.output[0])
        if first is None or first.op_type != "Mul":
            continue
        by = _other(first, add.output[0])
        second = only_user(first.output[0])
        if second is None or second.op_type != "Mul":
            continue
        last = _other(second, first.output[0])
        if not ((by == x and _scalar(consts, last or "", 0.5)) or (_scalar(consts, by or "", 0.5) and last == x)):
            continue
        found.append((x, [scale, erf, add, first, second], second.output[0]))
    return found


#: a model whose weights are larger is written with its weights beside it
_INLINE_BYTES = 1 << 30
#: the folder of the SavedModel's artifact that keeps the model as it was before the fusion (for TF.js)
UNFUSED = "unfused"


def _save(model, dst: Path) -> None:
    import onnx

    large = model.ByteSize() > _INLINE_BYTES
    onnx.save(model, str(dst), save_as_external_data=large, location=f"{dst.name}.data" if large else None)


def fuse_gelu(src: Path, dst: Path, unfused: Path | None = None) -> int:
    """Write ``src`` with each exact GELU as one ``Gelu`` node to ``dst`` and, when
    ``unfused`` is given, ``src`` as it is there (weights read, written into each file or, when large, beside
    it); the count fused (0: nothing is written)."""
    import onnx
    from onnx import helper

    if not find(onnx.load(str(src), load_external_data=False)):
        return 0
    given = model = onnx.load(str(src))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < GELU_OPSET:  # Gelu is an ONNX op from opset 20: the model's other nodes converted to it
        try:
            from onnx import version_converter

            model = version_converter.convert_version(model, GELU_OPSET)
        except Exception:  # noqa: BLE001 - a model the converter cannot lift keeps its Erf
            return 0
    found = find(model)
    if not found:
        return 0
    if unfused is not None:
        unfused.parent.mkdir(parents=True, exist_ok=True)
        _save(given, unfused)
    drop = {id(n) for _, nodes, _ in found for n in nodes}
    at = {id(nodes[-1]): (x, out, i) for i, (x, nodes, out) in enumerate(found)}
    kept = []
    for n in model.graph.node:
        if id(n) in at:
            x, out, i = at[id(n)]
            kept.append(helper.make_node("Gelu", [x], [out], name=f"gelu_fused_{i}"))
        elif id(n) not in drop:
            kept.append(n)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    _save(model, dst)
    return len(found)


def int32_inputs(src: Path, dst: Path) -> list[str]:
    """Write ``src`` with each int64 input taken as int32 and cast to int64 inside, under its own name, to
    ``dst``: LiteRT.js (and TF.js) take no int64 tensor, and token ids fit in int32. The names of those inputs
    (none: nothing is written)."""
    import onnx
    from onnx import TensorProto, helper

    head = onnx.load(str(src), load_external_data=False)
    inits, outs = {i.name for i in head.graph.initializer}, {o.name for o in head.graph.output}
    names = [i.name for i in head.graph.input if i.name not in inits | outs and i.type.tensor_type.elem_type == TensorProto.INT64]
    if not names or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in head.graph.node
                        for a in n.attribute):  # a subgraph may read an input by its name: left as it is
        return []
    model = onnx.load(str(src))
    inner = {n: f"{n}__int64" for n in names}
    for node in model.graph.node:
        node.input[:] = [inner.get(i, i) for i in node.input]
    casts = [helper.make_node("Cast", [n], [inner[n]], to=TensorProto.INT64, name=f"{n}__to_int64") for n in names]
    nodes = casts + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    for i in model.graph.input:
        if i.name in inner:
            i.type.tensor_type.elem_type = TensorProto.INT32
    _save(model, dst)
    return names


#: ONNX ops that onnx2tf turns into a TensorFlow op TFLite has no built-in for (a Flex op, which LiteRT and
#: LiteRT.js cannot run) and that its ``-rtpo`` builds from built-ins within float32 rounding: taken by default.
#: Erf (the exact GELU of BERT, ViT, wav2vec2): Abramowitz and Stegun 7.1.26, |error| <= 1.5e-7.
BUILTIN_BY_DEFAULT = ("Erf",)


def default_args(model: Path, args: list[str]) -> tuple[list[str], list[str]]:
    """``args`` with ``-rtpo`` for the model's ops in BUILTIN_BY_DEFAULT (unless ``args`` chooses ``-rtpo``
    itself), and those ops."""
    if "-rtpo" in args:
        return args, []
    import onnx

    ops = {n.op_type for n in onnx.load(str(model), load_external_data=False).graph.node}
    taken = [op for op in BUILTIN_BY_DEFAULT if op in ops]
    return (args + ["-rtpo", *taken], taken) if taken else (args, [])


def for_tflite(model: Path, tmp: Path, out_dir: Path, own: list[str]) -> tuple[Path, Path, list[str], dict]:
    """The ONNX model onnx2tf converts, the one with the given input types (for layout probes that feed the
    model's own inputs), onnx2tf's arguments and what was done (the artifact's meta): the exact GELUs
    fused (the model as given kept in ``out_dir/UNFUSED`` for TF.js and Core ML Tools), int64 inputs taken as
    int32, the remaining ``Erf`` built from built-ins (unless ``own``, the user's arguments, choose)."""
    done: dict = {}
    gelu = fuse_gelu(model, tmp / "gelu.onnx", unfused=out_dir / UNFUSED / "model.onnx")
    if gelu:  # TF.js and Core ML Tools have no Erfc (TensorFlow's exact GELU): they convert the model as given
        model, done["fused_gelu"], done["unfused"] = tmp / "gelu.onnx", gelu, {"path": f"{UNFUSED}/model.onnx", "args": own}
    probed = model
    ints = int32_inputs(model, tmp / "int32.onnx")
    if ints:
        model, done["int32_inputs"] = tmp / "int32.onnx", ints
    args, builtin = default_args(model, own)
    if builtin:
        done["builtin_ops"] = builtin
    return model, probed, args, done


def builtin_notes(meta: dict) -> list[str]:
    """What an artifact made from a SavedModel of onnx2tf says about the ops built for TFLite's built-ins."""
    gelu, ops, ints = meta.get("fused_gelu") or 0, meta.get("builtin_ops") or [], meta.get("int32_inputs") or []
    notes = [f"{gelu} exact GELU{'s' if gelu > 1 else ''} (Erf) converted as one GELU each (TFLite's built-in GELU, "
             "float and int8), not as a TensorFlow (Flex) op, which LiteRT cannot run"] if gelu else []
    if ops:
        notes.append(f"onnx2tf built {', '.join(ops)} from TFLite built-ins (-rtpo {' '.join(ops)}, within float32 "
                     "rounding), not as a TensorFlow (Flex) op, which LiteRT cannot run; an -rtpo of your own in "
                     "converter_options.SavedModelFromOnnx.args chooses instead")
    if ints:
        notes.append(f"the int64 input{'s' if len(ints) > 1 else ''} {', '.join(ints)} taken as int32 (cast to int64 "
                     "inside): LiteRT.js takes no int64 tensor; values beyond ±2^31 would not fit")
    return notes
