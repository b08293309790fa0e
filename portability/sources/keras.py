"""Keras 3 ``.keras`` files, loaded with ``safe_mode=True`` (a Lambda layer holding Python code is refused)
and referenced against Keras itself (``server/keras``).

The signature is the one Keras's own export serves: inputs by their names, in Keras's layout (channels
last for images), outputs ``output_0``, ``output_1``, ... — the keys of ``model.export``'s SavedModel, so
every native route (SavedModel, TFLite, TF.js) speaks the same names.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

from portability.core.errors import BadModel
from portability.core.model import ModelInfo
from portability.sources.common import digest, quiet_tf, spec, version

FORMAT = "keras"
REFERENCE = "server/keras"


def open_model(path: Path):
    """The Keras model in ``path`` (safe mode, not compiled); BadModel with one line otherwise."""
    if not zipfile.is_zipfile(path):
        raise BadModel(f"{path.name} is not a Keras 3 .keras file (not a zip archive: truncated or corrupt?)")
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        if "config.json" not in names:
            raise BadModel(f"{path.name} is not a Keras 3 .keras file (no config.json inside)")
        bad = z.testzip()
        if bad:
            raise BadModel(f"{path.name}: member {bad} is corrupt (truncated file?)")
    quiet_tf()
    import keras

    try:
        return keras.saving.load_model(str(path), safe_mode=True, compile=False)
    except Exception as e:
        msg = " ".join(str(e).split())
        if "safe_mode" in msg or "Lambda" in msg:
            raise BadModel(f"{path.name}: refused: it holds a Lambda layer (Python code), which Keras's safe mode "
                           "does not load and portability never runs; replace it by a registered layer") from None
        raise BadModel(f"{path.name}: Keras cannot load it ({type(e).__name__}: {msg[:300]})") from None


def signature(model) -> tuple[list, list]:
    try:
        ins, outs = list(model.inputs), list(model.outputs)
    except (AttributeError, ValueError):
        raise BadModel("the Keras model has no defined inputs (build it with keras.Input)") from None
    inputs = [spec(t.name, t.dtype, t.shape) for t in ins]
    outputs = [spec(f"output_{i}", t.dtype, t.shape) for i, t in enumerate(outs)]
    return inputs, outputs


def load(path) -> ModelInfo:
    p = Path(path).resolve()
    model = open_model(p)
    inputs, outputs = signature(model)
    sha, size = digest([p])
    return ModelInfo(path=p, sha256=sha, size_bytes=size, opset=None, producer=f"keras ({type(model).__name__} "
                     f"'{model.name}')", inputs=tuple(inputs), outputs=tuple(outputs), format=FORMAT,
                     framework=version("keras"))
