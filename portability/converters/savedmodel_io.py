"""The tensor mapping of a native SavedModel (one a framework wrote, not onnx2tf): the source's names
-> the ``serving_default`` signature keys, identity layouts. Recorded as ``meta["tflite_io"]`` (the
shape ``TfSavedModel``, the TFLite and the TF.js converters read)."""
from __future__ import annotations

import os
from pathlib import Path

from portability.core.errors import ConvertError
from portability.core.protocol import IoMap, TensorLink


def _pair(names: list[str], keys: list[str], kind: str) -> list[str]:
    """Each source name's key: the same name, else the key at its position."""
    if len(keys) < len(names):
        raise ConvertError(f"the SavedModel signature has {len(keys)} {kind}, the source {len(names)}")
    rest = [k for k in keys if k not in names]
    return [n if n in keys else rest.pop(0) for n in names]


def savedmodel_io(folder: Path, sig: dict) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    fn = tf.saved_model.load(str(folder)).signatures["serving_default"]
    ins, outs = fn.structured_input_signature[1], fn.structured_outputs
    links = {"inputs": [], "outputs": []}
    for kind, specs, table in (("inputs", sig["inputs"], ins), ("outputs", sig["outputs"], outs)):
        keys = _pair([t["name"] for t in specs], sorted(table) if kind == "outputs" else list(table), kind)
        for i, (t, key) in enumerate(zip(specs, keys)):
            shape = table[key].shape.as_list() if table[key].shape.rank is not None else []
            links[kind].append(TensorLink(onnx=t["name"], index=i, tensor=key, shape=tuple(-1 if d is None else d for d in shape),
                                          dtype=table[key].dtype.name, perm=tuple(range(len(shape))), key=key))
    return IoMap(tuple(links["inputs"]), tuple(links["outputs"]), "native", True).to_dict()
