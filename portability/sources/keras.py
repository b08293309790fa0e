"""Keras 3 ``.keras`` files, loaded with ``safe_mode=True`` (a Lambda layer holding Python code is refused)
and referenced against Keras itself (``server/keras``).

The signature is the one Keras's own export serves: inputs by their names, in Keras's layout (channels
last for images), outputs ``output_0``, ``output_1``, ... — the keys of ``model.export``'s SavedModel, so
every native route (SavedModel, TFLite, TF.js) speaks the same names.
"""
from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from portability.core.errors import BadModel
from portability.core.model import ModelInfo
from portability.sources.common import GradientAdapter, allowlists_on, digest, quiet_tf, spec, version

#: its reader forks from the worker pool that imported TensorFlow (``sources._child``)
POOL = "tensorflow"
FORMAT = "keras"
REFERENCE = "server/keras"
#: the framework its gradient adapter (``Gradients``) needs
GRADIENTS = "tensorflow"


def claims(p: Path) -> bool:
    """A Keras 3 archive, by its name (``detect``: names and a few bytes only)."""
    return p.is_file() and p.suffix.lower() == ".keras"


def open_model(path: Path):
    """The Keras model in ``path`` (safe mode, not compiled); BadModel with one line otherwise."""
    vet(path)
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


def vet(path: Path) -> None:
    """What is read before Keras is: the archive, its members' integrity and the config's allow-list."""
    if not zipfile.is_zipfile(path):
        raise BadModel(f"{path.name} is not a Keras 3 .keras file (not a zip archive: truncated or corrupt?)")
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if "config.json" not in names:
                raise BadModel(f"{path.name} is not a Keras 3 .keras file (no config.json inside)")
            bad = z.testzip()
            if bad:
                raise BadModel(f"{path.name}: member {bad} is corrupt (truncated file?)")
            if allowlists_on():
                _vet_config(path, z.read("config.json"))
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as e:
        raise BadModel(f"{path.name}: a damaged .keras archive ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None


#: the non-Keras objects Keras 3 itself serializes into a config (tensors, tuples, arrays...)
_KERAS_BUILTINS = {"__keras_tensor__", "__tuple__", "__numpy__", "__bytes__", "__typespec__", "__tensor__",
                   "__ellipsis__", "__slice__"}
#: config keys whose string value names a file
_FILE_KEYS = ("vocabulary", "vocabulary_file", "filepath", "file_path", "path", "filename", "idf_weights")


def _vet_config(path: Path, raw: bytes) -> None:
    """Every object of the config a Keras class, every layer's data inside the archive: a Lambda (Python
    code), a class of another package (code that loading imports) or a file path is refused naming it."""
    import json

    try:
        cfg = json.loads(raw)
    except ValueError:
        raise BadModel(f"{path.name} is not a Keras 3 .keras file (config.json is not JSON)") from None
    stack, layer = [(cfg, "the model")], "the model"
    while stack:
        obj, layer = stack.pop()
        if isinstance(obj, list):
            stack.extend((v, layer) for v in obj)
            continue
        if not isinstance(obj, dict):
            continue
        if "class_name" in obj:
            why = _object_refusal(obj)
            inner = (obj.get("config") or {}) if isinstance(obj.get("config"), dict) else {}
            layer = f"'{inner.get('name')}'" if inner.get("name") else layer
            if why:
                raise BadModel(f"{path.name}: refused: layer {layer} {why}")
            for key in _FILE_KEYS:
                v = inner.get(key)
                if isinstance(v, str) and v:
                    raise BadModel(f"{path.name}: refused: layer {layer} ({obj['class_name']}) reads its {key} from the "
                                   f"file '{v[:80]}' outside the archive; give the values themselves (a list)")
        # the training configuration (loss, metrics, optimizer) is never read: models load with compile=False
        stack.extend((v, layer) for k, v in obj.items() if k != "compile_config")


def _object_refusal(obj: dict) -> str | None:
    name, module = str(obj.get("class_name")), obj.get("module")
    if name in ("Lambda", "__lambda__") or "lambda" in str(obj.get("registered_name") or "").lower():
        return "holds a Lambda layer (Python code), which Keras's safe mode does not load and portability never runs"
    if name == "function" and not str(module).startswith("keras"):
        return f"names the Python function '{str(obj.get('config'))[:60]}' (code, not a Keras built-in)"
    if module in (None, "builtins"):
        return None if name in _KERAS_BUILTINS else f"holds a serialized Python object of class '{name[:60]}'"
    if not (str(module) == "keras" or str(module).startswith("keras.")):
        return (f"is the class '{name[:60]}' of the package '{str(module)[:60]}', not a Keras class (code that loading "
                "would import): register nothing, use Keras's own layers")
    return None


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


class Gradients(GradientAdapter):
    """Keras's gradient adapter (``GradientAdapter``): TensorFlow's tape on the model."""

    framework = "keras"

    def __init__(self, path: str):
        import tensorflow as tf

        self.tf = tf
        self.model = open_model(Path(path))

    def forward(self, ts):
        return self.model(ts[0] if len(ts) == 1 else ts, training=False)

    def scores(self, xs, out_idx):
        return [np.asarray(y) for y in self._outs([self.tf.convert_to_tensor(x) for x in xs])]

    def grads(self, xs, y, out_idx, probs):
        tf = self.tf
        ts = [tf.convert_to_tensor(x) for x in xs]
        wrt = [t for t, x in zip(ts, xs) if x.dtype.kind == "f"]
        with tf.GradientTape() as tape:
            for t in wrt:
                tape.watch(t)
            s = self._outs(ts)[out_idx]
            s = tf.cast(tf.reshape(s, (-1, s.shape[-1])), tf.float32)
            logp = tf.math.log(tf.maximum(s, 1e-12)) if probs else tf.nn.log_softmax(s, -1)
            loss = -tf.reduce_sum(tf.gather(logp, y.astype(np.int64), axis=1, batch_dims=1))
        g = iter(tape.gradient(loss, wrt))
        return [np.asarray(next(g)) if x.dtype.kind == "f" else None for x in xs]
