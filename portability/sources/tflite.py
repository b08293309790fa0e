"""``.tflite`` files, referenced against LiteRT (``mobile/tflite-fp32``: the file as given).

Signature: the file's signature keys when it has a signature, else its tensor names, in its own layout."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from portability.core.errors import BadModel
from portability.core.model import ModelInfo
from portability.sources.common import digest, spec, version

FORMAT = "tflite"
REFERENCE = "mobile/tflite-fp32"


def claims(p: Path) -> bool:
    return p.is_file() and p.suffix.lower() == ".tflite"


def interpreter_io(it) -> tuple[list, list]:
    """(inputs, outputs) as [(name, detail)], named by signature key when there is a signature."""
    full = getattr(it, "_get_full_signature_list", it.get_signature_list)()
    sig = next(iter(full.values()), None) if full else None
    by_index = {d["index"]: d for d in it.get_input_details() + it.get_output_details()}
    if sig and sig.get("inputs") and sig.get("outputs"):
        return ([(k, by_index[i]) for k, i in sig["inputs"].items()],
                [(k, by_index[i]) for k, i in sig["outputs"].items()])
    return [(d["name"], d) for d in it.get_input_details()], [(d["name"], d) for d in it.get_output_details()]


def load(path) -> ModelInfo:
    p = Path(path).resolve()
    head = p.read_bytes()[:8]
    if len(head) < 8 or head[4:8] != b"TFL3":
        raise BadModel(f"{p.name} is not a TFLite flatbuffer (no TFL3 identifier: truncated or another format)")
    from ai_edge_litert.interpreter import Interpreter

    try:
        it = Interpreter(model_path=str(p), num_threads=1)
    except Exception as e:
        raise BadModel(f"{p.name}: LiteRT cannot read it ({' '.join(str(e).split())[:300]})") from None
    conv = lambda items: tuple(spec(n, np.dtype(d["dtype"]).name, [int(x) for x in d.get("shape_signature", d["shape"])])  # noqa: E731
                               for n, d in items)
    try:
        ins, outs = interpreter_io(it)
        inputs, outputs = conv(ins), conv(outs)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as e:  # a name that is not text, a bad type
        raise BadModel(f"{p.name}: LiteRT reads a malformed signature ({type(e).__name__}: "
                       f"{' '.join(str(e).split())[:200]})") from None
    sha, size = digest([p])
    return ModelInfo(path=p, sha256=sha, size_bytes=size, opset=None, producer="TFLite flatbuffer",
                     inputs=inputs, outputs=outputs, format=FORMAT, framework=version("ai-edge-litert"))
