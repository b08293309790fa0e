"""Static input shapes for converters that need them (onnx2tf, the ORT-format converter).

A check resolves every dynamic input dimension before anything runs (``--shape``, or the defaults with a
warning, or the shapes of ``--inputs``/``--dataset``); the feeds have exactly those shapes. Converters
that leave ONNX receive the same shapes (``ConvertContext.input_shapes``: only the inputs that have a
dynamic dimension, so a static model converts exactly as without them) and record what they used.
"""
from __future__ import annotations

from pathlib import Path


def fix_input_shapes(src: Path, dst: Path, shapes: dict[str, list[int]] | None = None,
                     batch: int = 1) -> dict[str, list[int]]:
    """Copy ``src`` to ``dst`` with every symbolic/unknown input dimension fixed: to ``shapes[name]``
    where given, else ``batch`` for a leading dim and 1 elsewhere. Output shapes are re-inferred.
    Returns the fixed input shapes (empty when nothing was dynamic).

    Dimensions are fixed by input and axis, never by symbolic name alone: an export may give one name to
    several axes that take different sizes (Paddle writes ``?`` for every unknown axis). A name that every
    fixed axis gives one size is fixed to it throughout the graph; a name given several sizes says nothing
    about the graph's other tensors, and its dims there become unknown (shape inference fills them in)."""
    import onnx
    from portability.converters.ort_tools import ort_tool

    utils = ort_tool("onnx_model_utils")
    fix_output_shapes, remove_invalid_dim_values = utils.fix_output_shapes, utils.remove_invalid_dim_values

    model = onnx.load(str(src))
    remove_invalid_dim_values(model.graph)  # a dim_value of -1 or 0 is an unknown dim
    inits = {i.name for i in model.graph.initializer}
    fixed: dict[str, list[int]] = {}
    sizes: dict[str, set[int]] = {}  # each symbolic name: the sizes its axes were fixed to
    for inp in model.graph.input:
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        dims = inp.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            continue
        given = (shapes or {}).get(inp.name)
        shape = [int(x) for x in given] if given is not None else [
            d.dim_value if d.HasField("dim_value") else (batch if i == 0 else 1) for i, d in enumerate(dims)]
        if len(shape) != len(dims):
            raise ValueError(f"{inp.name}: rank mismatch: the model's {len(dims)}, the given {len(shape)}")
        for i, (d, v) in enumerate(zip(dims, shape)):
            if d.HasField("dim_value") and d.dim_value != v:
                raise ValueError(f"{inp.name}: can't replace the fixed size {d.dim_value} of dimension {i + 1} with {v}")
            if d.HasField("dim_param") and d.dim_param:
                sizes.setdefault(d.dim_param, set()).add(v)
            d.Clear()
            d.dim_value = v
        fixed[inp.name] = shape
    for d in _dims(model.graph):
        if d.HasField("dim_param") and d.dim_param in sizes:
            one = sizes[d.dim_param]
            d.Clear()
            if len(one) == 1:
                d.dim_value = next(iter(one))
    if fixed:
        fix_output_shapes(model)
    onnx.save(model, str(dst))
    return fixed


def _dims(graph):
    """Every dimension of every declared tensor shape in ``graph`` and its subgraphs."""
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            yield from v.type.tensor_type.shape.dim
    for n in graph.node:
        for a in n.attribute:
            for g in ([a.g] if a.type == a.GRAPH else list(a.graphs) if a.type == a.GRAPHS else []):
                yield from _dims(g)


def onnx2tf_args(shapes: dict[str, list[int]] | None) -> list[str]:
    """onnx2tf's ``--overwrite_input_shape`` arguments (``name:d0,d1,...``) for ``shapes``."""
    if not shapes:
        return []
    return ["-ois"] + [f"{name}:{','.join(str(int(d)) for d in dims)}" for name, dims in shapes.items()]
