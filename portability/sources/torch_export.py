"""PyTorch ``torch.export`` programs (``.pt2``), referenced against eager PyTorch (``server/torch``).

``torch.export.load`` is not pickle-free: it unpickles weights or constants saved with ``use_pickle``,
custom and opaque objects, and falls back to a full unpickle of the sample inputs. ``open_program``
vets the archive first: every weight and constant must be a raw tensor file, no custom object, sample
inputs loadable with ``torch.load(weights_only=True)`` — else the file is refused before torch reads it.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from portability.core.errors import BadModel
from portability.core.model import ModelInfo
from portability.sources.common import digest, spec, version

FORMAT = "torch"
REFERENCE = "server/torch"
_REFUSE = "refused: it would be unpickled (loading a pickle runs code); re-export it with torch.export.save from a model whose weights are plain tensors"


def vet(path: Path) -> None:
    if not zipfile.is_zipfile(path):
        raise BadModel(f"{path.name} is not a torch.export archive (not a zip file: truncated or another format)")
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        if any(n.endswith(("data.pkl", "constants.pkl")) for n in names):
            raise BadModel(f"{path.name} is a TorchScript or torch.save archive (pickled): export the model with torch.export.save")
        if not any(n.endswith("archive_format") for n in names) or not any("/models/" in n and n.endswith(".json") for n in names):
            raise BadModel(f"{path.name} is not a torch.export program archive (no models/*.json)")
        for n in names:
            if n.endswith(("model_weights_config.json", "model_constants_config.json")):
                for fqn, e in (json.loads(z.read(n)).get("config") or {}).items():
                    if e.get("use_pickle") or not str(e.get("path_name", "")).startswith(("weight_", "tensor_", "constant_")):
                        raise BadModel(f"{path.name}: '{fqn}' is a pickled object: {_REFUSE}")
            if n.endswith(".pt") and "sample_inputs" in n:
                import torch

                try:
                    torch.load(io.BytesIO(z.read(n)), weights_only=True)
                except Exception:
                    raise BadModel(f"{path.name}: its sample inputs are not plain tensors: {_REFUSE}") from None


def open_program(path: Path):
    vet(path)
    import torch

    try:
        return torch.export.load(str(path))
    except Exception as e:
        raise BadModel(f"{path.name}: torch.export.load failed ({type(e).__name__}: {' '.join(str(e).split())[:300]})") from None


def _dims(val) -> list:
    return [int(d) if isinstance(d, int) else None for d in getattr(val, "shape", ())]


def signature(ep) -> tuple[list, list]:
    sig = ep.graph_signature
    nodes = {n.name: n for n in ep.graph.nodes}
    inputs = []
    for name in sig.user_inputs:
        val = nodes[name].meta.get("val")
        if val is None or not hasattr(val, "dtype"):
            raise BadModel(f"input '{name}' is not a tensor: only tensor inputs are supported")
        inputs.append(spec(name, str(val.dtype).removeprefix("torch."), _dims(val)))
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    vals = [a.meta.get("val") if hasattr(a, "meta") else None for a in out_node.args[0]]
    outputs = [spec(name, str(v.dtype).removeprefix("torch.") if v is not None else "float32", _dims(v))
               for name, v in zip(sig.user_outputs, vals)]
    return inputs, outputs


def load(path) -> ModelInfo:
    p = Path(path).resolve()
    ep = open_program(p)
    inputs, outputs = signature(ep)
    sha, size = digest([p])
    return ModelInfo(path=p, sha256=sha, size_bytes=size, opset=None, producer="torch.export program",
                     inputs=tuple(inputs), outputs=tuple(outputs), format=FORMAT, framework=version("torch"))
