"""TensorFlow SavedModel folders, referenced against TensorFlow (``server/tf``) on their
``serving_default`` signature.

Read only inside the folder: a link leaving it is refused, the variables must be there, and every op of
the graph and its functions must be a vetted computation op (``tf_ops``, ``tf_vet``: an allow-list, so a
file, stream, dataset or Python op is refused naming it) before TensorFlow loads it; checkpoint I/O only in
the saver the loader drives, asset files only inside the folder. Signature: inputs and outputs by keys.
"""
from __future__ import annotations

import re
from pathlib import Path

from portability.core.errors import BadModel
from portability.core.model import ModelInfo
from portability.sources import tf_vet
from portability.sources.common import allowlists_on, digest, folder_files, quiet_tf, spec, version

#: its reader forks from the worker pool that imported TensorFlow (``sources._child``)
POOL = "tensorflow"
FORMAT = "saved_model"
REFERENCE = "server/tf"


def claims(p: Path) -> bool:
    """A SavedModel folder, or its ``saved_model.pb``."""
    return (p.is_dir() and (p / "saved_model.pb").is_file()) or p.name == "saved_model.pb"
SIGNATURE = "serving_default"
def folder_of(path) -> Path:
    p = Path(path).resolve()
    return p if p.is_dir() else p.parent


def check_folder(folder: Path) -> list[Path]:
    files = folder_files(folder)
    if not (folder / "saved_model.pb").is_file():
        raise BadModel(f"{folder} has no saved_model.pb: not a SavedModel")
    var = folder / "variables"
    if var.is_dir() or any(f.name.startswith("variables.") for f in files):
        if not (var / "variables.index").is_file() or not list(var.glob("variables.data-*")):
            raise BadModel(f"{folder.name}: the SavedModel's variables are missing or incomplete "
                           "(variables/variables.index and variables.data-* must be present)")
    if allowlists_on():
        _check_ops(folder / "saved_model.pb")
    return files


def _check_ops(pb: Path) -> None:
    """Every op of every function and of the graph in the vetted set (``tf_ops``); checkpoint I/O only in the
    saver the loader drives; assets inside the folder. BadModel naming the first op or asset refused."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    try:
        sm.ParseFromString(pb.read_bytes())
    except Exception:
        raise BadModel(f"{pb} is not a valid SavedModel protobuf (truncated or corrupt)") from None
    for mg in sm.meta_graphs:
        why = tf_vet.refusal(mg, pb.parent)
        if why:  # names come from the file: keep the line one line of printable text
            raise BadModel(f"{pb.parent.name}: refused: " + "".join(c if c.isprintable() else "?" for c in why)[:500])


def open_signature(folder: Path):
    quiet_tf()
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(folder))
    except Exception as e:
        raise BadModel(f"{folder.name}: TensorFlow cannot load the SavedModel ({' '.join(str(e).split())[:300]})") from None
    if SIGNATURE not in loaded.signatures:
        raise BadModel(f"{folder.name}: the SavedModel has no '{SIGNATURE}' signature (has: {', '.join(loaded.signatures) or 'none'})")
    return loaded, loaded.signatures[SIGNATURE]


def _natural(key: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key)]


def signature(fn) -> tuple[list, list]:
    ins = fn.structured_input_signature[1]
    outs = fn.structured_outputs
    inputs = [spec(k, ins[k].dtype.name, ins[k].shape.as_list() if ins[k].shape.rank is not None else ()) for k in ins]
    outputs = [spec(k, outs[k].dtype.name, outs[k].shape.as_list() if outs[k].shape.rank is not None else ())
               for k in sorted(outs, key=_natural)]
    return inputs, outputs


def load(path) -> ModelInfo:
    folder = folder_of(path)
    files = check_folder(folder)
    _loaded, fn = open_signature(folder)
    inputs, outputs = signature(fn)
    sha, size = digest(files)
    return ModelInfo(path=folder / "saved_model.pb", sha256=sha, size_bytes=size, opset=None,
                     producer=f"TensorFlow SavedModel ({SIGNATURE})", inputs=tuple(inputs), outputs=tuple(outputs),
                     format=FORMAT, framework=version("tensorflow-cpu") if version("tensorflow-cpu") != "tensorflow-cpu"
                     else version("tensorflow"))
