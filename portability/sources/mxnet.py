"""Legacy MXNet checkpoints: ``NAME-symbol.json`` (the graph) + ``NAME-EPOCH.params`` (the weights, MXNet's
own NDArray container: no pickle), as ``HybridBlock.export`` and ``Module.save_checkpoint`` write them.
Referenced against MXNet itself (``server/mxnet``), which runs in MXNet's own environment
(``core/mxnet_env.py``: MXNet 1.9 cannot share the main stack); routed to ONNX through MXNet's exporter.

A checkpoint holds no input shapes: the check needs ``--shape NAME=DIMS`` for every input (the first dim is
the batch). The model's path is the ``-symbol.json`` file, or a folder holding one checkpoint.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from portability.core.errors import BadModel
from portability.core.model import ModelInfo
from portability.sources.common import digest, spec

FORMAT = "mxnet"
REFERENCE = "server/mxnet"
#: MXNet's side of the source (run by MXNet's interpreter, never imported here)
TOOL = Path(__file__).resolve().parent / "mxnet_tool.py"
SYMBOL = re.compile(r"^(?P<name>.+)-symbol\.json$")


def is_checkpoint(p: Path) -> bool:
    """A ``-symbol.json`` file, or a folder with one (names only: nothing is read)."""
    if p.is_dir():
        return any(SYMBOL.match(c.name) for c in p.iterdir() if c.is_file())
    return bool(SYMBOL.match(p.name))


def claims(p: Path) -> bool:
    """A ``-symbol.json`` file, or a folder with one that is not a TF.js model's (which has ``model.json``)."""
    return is_checkpoint(p) and not (p.is_dir() and (p / "model.json").is_file())


def pair(path: str | Path) -> tuple[Path, Path]:
    """(symbol, params) of the checkpoint at ``path``: its highest epoch's ``.params`` beside the symbol."""
    p = Path(path)
    if p.is_dir():
        symbols = sorted(c for c in p.iterdir() if c.is_file() and SYMBOL.match(c.name))
        if len(symbols) != 1:
            raise BadModel(f"{p} holds {len(symbols)} MXNet checkpoints (NAME-symbol.json): give the one to check")
        p = symbols[0]
    m = SYMBOL.match(p.name)
    if not m:
        raise BadModel(f"{p.name} is not an MXNet symbol file (NAME-symbol.json)")
    params = sorted(p.parent.glob(f"{glob_escape(m['name'])}-[0-9][0-9][0-9][0-9].params"))
    if not params:
        raise BadModel(f"{p.name}: no {m['name']}-NNNN.params beside it (the checkpoint's weights)")
    for f in (p, params[-1]):
        if f.is_symlink():
            raise BadModel(f"{f.name} is a symbolic link: refused")
    return p, params[-1]


def glob_escape(s: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", s)


def parse_shapes(shapes) -> dict[str, list[int]]:
    """``["data=1x1x28x28"]`` (``--shape``) -> ``{"data": [1, 1, 28, 28]}``."""
    out = {}
    for s in shapes or ():
        name, _, dims = str(s).partition("=")
        if not dims:
            raise BadModel(f"--shape '{s}': an MXNet model's inputs have no shapes to go by: give NAME=DIMS")
        out[name.strip()] = [int(d) for d in dims.lower().split("x")]
    return out


def tool(*args: str, timeout_s: float = 600) -> dict:
    """Run MXNet's side in its environment; its one JSON line (``error`` included)."""
    from portability.core import mxnet_env

    ok, why = mxnet_env.status()
    if not ok:
        raise BadModel(f"an MXNet model needs MXNet's own environment: {why}")
    p = subprocess.run([str(mxnet_env.python()), "-P", str(TOOL), *args], capture_output=True, text=True,
                       timeout=timeout_s, env=mxnet_env.env(), stdin=subprocess.DEVNULL)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (p.stderr.strip().splitlines() or ["no answer"])[-1]
        return {"error": f"MXNet's environment failed (exit {p.returncode}): {tail}"}


def load(path, shapes=None) -> ModelInfo:
    symbol, params = pair(path)
    try:
        json.loads(symbol.read_text())
    except (ValueError, UnicodeDecodeError):
        raise BadModel(f"{symbol.name} is not a JSON symbol file") from None
    answer = tool("signature", str(symbol), str(params), json.dumps(parse_shapes(shapes)))
    if "error" in answer:
        raise BadModel(f"{symbol.name}: {answer['error']}")
    batched = lambda s: [None, *s[1:]] if s else s  # noqa: E731 - the first dim is the batch
    sha, size = digest([symbol, params])
    return ModelInfo(path=symbol.resolve(), sha256=sha, size_bytes=size, opset=None, producer=f"MXNet {answer['mxnet']}",
                     inputs=tuple(spec(i["name"], i["dtype"], batched(i["shape"])) for i in answer["inputs"]),
                     outputs=tuple(spec(o["name"], o["dtype"], batched(o["shape"])) for o in answer["outputs"]),
                     format=FORMAT, framework=f"mxnet {answer['mxnet']}")
