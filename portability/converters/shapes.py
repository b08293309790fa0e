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
    Returns the fixed input shapes (empty when nothing was dynamic)."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_input_shape_fixed

    model = onnx.load(str(src))
    inits = {i.name for i in model.graph.initializer}
    fixed = {}
    for inp in model.graph.input:
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        dims = inp.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") or d.dim_value <= 0 for d in dims):
            given = (shapes or {}).get(inp.name)
            shape = [int(x) for x in given] if given is not None else [
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (batch if i == 0 else 1)
                for i, d in enumerate(dims)]
            make_input_shape_fixed(model.graph, inp.name, shape)
            fixed[inp.name] = shape
    if fixed:
        fix_output_shapes(model)
    onnx.save(model, str(dst))
    return fixed


def onnx2tf_args(shapes: dict[str, list[int]] | None) -> list[str]:
    """onnx2tf's ``--overwrite_input_shape`` arguments (``name:d0,d1,...``) for ``shapes``."""
    if not shapes:
        return []
    return ["-ois"] + [f"{name}:{','.join(str(int(d)) for d in dims)}" for name, dims in shapes.items()]
