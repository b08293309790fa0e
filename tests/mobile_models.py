"""Tiny ONNX models built in code for the mobile / ARM64 tests, and a helper that converts through the cache."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from portability.converters.base import ConvertContext
from portability.core.artifact import Artifact
from portability.workers.cache import Cache
from portability.targets.base import load_class


def conv_model(path: Path, shape=(1, 3, 5, 7), batch: int | str = 1) -> Path:
    """Conv(3x3, pad 1) + Relu on a non-square, multi-channel input: [N,3,5,7] -> [N,4,5,7].

    Every axis has a different size, so any wrong transposition breaks the shapes or the values."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    c = shape[1]
    w = nh.from_array((rng.standard_normal((4, c, 3, 3)) * 0.3).astype(np.float32), "W")
    b = nh.from_array((rng.standard_normal(4) * 0.1).astype(np.float32), "B")
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])]
    ishape = [batch, *shape[1:]]
    g = h.make_graph(nodes, "conv", [h.make_tensor_value_info("x", T.FLOAT, ishape)],
                     [h.make_tensor_value_info("y", T.FLOAT, [batch, 4, shape[2], shape[3]])], [w, b])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def castlike_model(path: Path) -> Path:
    """Relu -> CastLike(fp16) -> Cast(fp32): valid ONNX that ONNX Runtime runs and onnx2tf cannot convert."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("CastLike", ["r", "t"], ["c"], name="the_castlike"),
             h.make_node("Cast", ["c"], ["y"], to=T.FLOAT)]
    g = h.make_graph(nodes, "castlike", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])], [nh.from_array(np.array([1], np.float16), "t")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def convert(model: Path, chain, cache_root: Path, calibration: dict | None = None) -> Artifact:
    from portability.core.model import load_model

    art = load_model(model).artifact()
    ctx = ConvertContext(calibration=calibration, calibration_source="synthesized" if calibration else None)
    cache = Cache(cache_root)
    for cls, opts in chain:
        art, _ = cache.convert(load_class(cls)(), art, opts, ctx)
    return art


def reference(model: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
