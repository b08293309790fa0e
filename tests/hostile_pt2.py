"""Crafted ``torch.export`` archives (``.pt2``) for the reader's tests. Each keeps the program's real weights,
so that ``torch.export.load`` would still produce a working program (and the check would pass) while the
payload runs: a pickle whose first act is ``exec`` of code that creates ``marker``, or code that torch hands
to sympy's ``eval`` or to ``exec``. The AOTInductor entry holds arbitrary bytes (a shared library is hard to
build portably): it must be refused by name before anything would load it.

Every builder takes a program, the archive to write and the marker, and returns the entry the refusal
must name."""
from __future__ import annotations

import io
import json
import pickle
import struct
import zipfile
from pathlib import Path


def payload(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').close()"


def inject(stream: bytes, code: str) -> bytes:
    """A pickle stream that first calls ``exec(code)`` (and drops its result), then builds what it built."""
    assert stream[:1] == b"\x80", "a pickle stream with a PROTO header"
    text = code.encode()
    call = b"cbuiltins\nexec\n" + b"X" + struct.pack("<I", len(text)) + text + b"\x85R0"
    return stream[:2] + call + stream[2:]


def hostile_torch_save(obj, code: str) -> bytes:
    """``torch.save(obj)`` whose ``data.pkl`` runs ``code`` when unpickled (``weights_only=False``)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return _rezip(buf.getvalue(), lambda n, b: inject(b, code) if n.endswith("/data.pkl") else b)


def _rezip(raw: bytes, edit) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as zi, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zo:
        for i in zi.infolist():
            zo.writestr(i.filename, edit(i.filename, zi.read(i.filename)))
    return out.getvalue()


def entries(ep) -> tuple[str, dict[str, bytes]]:
    """What ``torch.export.save(ep)`` writes: its folder and its entries by name below it, in order."""
    import torch

    buf = io.BytesIO()
    torch.export.save(ep, buf)
    with zipfile.ZipFile(buf) as z:
        names = z.namelist()
        root = names[0].split("/")[0]
        return root, {n.split("/", 1)[1]: z.read(n) for n in names}


def write(dst: Path, root: str | None, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        for rel, data in files.items():
            z.writestr(f"{root}/{rel}" if root else rel, data)
    return dst


def _weights(files: dict[str, bytes]) -> dict:
    return json.loads(files["data/weights/model_weights_config.json"])


def _pickled_weight(ep, files: dict[str, bytes], code: str, config: str) -> dict:
    """The weights configuration with its first weight moved to a pickled file (``use_pickle``) that runs code."""
    cfg = _weights(files)
    fqn = next(iter(cfg["config"]))
    n = sum(1 for rel in files if rel.startswith("data/weights/weight_"))
    files[f"data/weights/weight_{n}"] = hostile_torch_save(ep.state_dict[fqn], code)
    cfg["config"][fqn].update(path_name=f"weight_{n}", use_pickle=True)
    files[config] = json.dumps(cfg).encode()
    return cfg


# -- the builders --------------------------------------------------------------------------------------------

def legacy_weights(ep, dst: Path, marker: Path) -> str:
    """``data/weights/model.pt``: torch.export.load prefers it to the raw tensors and unpickles it."""
    root, files = entries(ep)
    files["data/weights/model.pt"] = hostile_torch_save(dict(ep.state_dict), payload(marker))
    write(dst, root, files)
    return "data/weights/model.pt"


def legacy_constants(ep, dst: Path, marker: Path) -> str:
    """``data/constants/model.pt``: the constants' legacy pickle."""
    root, files = entries(ep)
    files["data/constants/model.pt"] = hostile_torch_save(dict(ep.constants), payload(marker))
    write(dst, root, files)
    return "data/constants/model.pt"


def second_program(ep, dst: Path, marker: Path) -> str:
    """A second program, ``models/extra.json``, whose own weights configuration has a pickled weight: torch
    loads every program in the archive and returns only ``model``."""
    root, files = entries(ep)
    extra = dict(files)
    _pickled_weight(ep, extra, payload(marker), "data/weights/extra_weights_config.json")
    files.update({k: v for k, v in extra.items() if k.startswith("data/weights/weight_")})
    files["data/weights/extra_weights_config.json"] = extra["data/weights/extra_weights_config.json"]
    files["data/constants/extra_constants_config.json"] = files["data/constants/model_constants_config.json"]
    files["data/sample_inputs/extra.pt"] = files["data/sample_inputs/model.pt"]
    files["models/extra.json"] = files["models/model.json"]
    write(dst, root, files)
    return "data/weights/extra_weights_config.json"


def aoti_library(ep, dst: Path, marker: Path) -> str:
    """An AOTInductor model with a shared library (any bytes here): torch would extract and dlopen it."""
    root, files = entries(ep)
    files["data/aotinductor/model/model.so"] = b"\x7fELF" + bytes(60)
    files["data/aotinductor/model/model.wrapper.cpp"] = b"// " + payload(marker).encode()
    write(dst, root, files)
    return "data/aotinductor/model/model.so"


def pre_27_layout(ep, dst: Path, marker: Path) -> str:
    """The pre-2.7 layout (no archive folder, no ``archive_format``): torch.export.load falls back to it and
    reads its state dict with ``torch.load``, retrying with ``weights_only=False`` when that fails."""
    import torch
    from torch._export.serde.schema import SCHEMA_VERSION

    _, files = entries(ep)

    def saved(obj) -> bytes:
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getvalue()

    write(dst, None, {
        "version": ".".join(map(str, SCHEMA_VERSION)).encode(),
        "serialized_exported_program.json": files["models/model.json"],
        "serialized_state_dict.pt": hostile_torch_save(dict(ep.state_dict), payload(marker)),
        "serialized_constants.pt": saved(dict(ep.constants)),
        "serialized_example_inputs.pt": saved(ep.example_inputs),
    })
    return "version"


def use_pickle(ep, dst: Path, marker: Path) -> str:
    """A weight whose configuration entry says ``use_pickle``: torch.load(weights_only=False) reads it."""
    root, files = entries(ep)
    _pickled_weight(ep, files, payload(marker), "data/weights/model_weights_config.json")
    write(dst, root, files)
    return "data/weights/model_weights_config.json"


def opaque_constant(ep, dst: Path, marker: Path) -> str:
    """An opaque-object constant: torch.export.load hands its bytes to ``pickle.loads``."""
    import torch

    root, files = entries(ep)
    cfg = json.loads(files["data/constants/model_constants_config.json"])
    cfg["config"]["opaque"] = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True, "tensor_meta": None}
    files["data/constants/opaque_obj_0"] = inject(pickle.dumps(torch.zeros(1), protocol=2), payload(marker))
    files["data/constants/model_constants_config.json"] = json.dumps(cfg).encode()
    write(dst, root, files)
    return "data/constants/opaque_obj_0"


def unknown_entry(ep, dst: Path, marker: Path) -> str:
    """An entry torch.export.save never writes (the XL-weights parameter file)."""
    root, files = entries(ep)
    files["xl_model_weights/model_param_config"] = inject(pickle.dumps({}, protocol=2), payload(marker))
    write(dst, root, files)
    return "xl_model_weights/model_param_config"


def symbolic_expression(ep, dst: Path, marker: Path) -> str:
    """A symbolic size whose expression calls ``open``: the deserializer hands it to sympy, which evals it.
    The program must have a dynamic first input dimension."""
    root, files = entries(ep)
    doc = json.loads(files["models/model.json"])
    graph = doc["graph_module"]["graph"]
    user = next(s["user_input"]["arg"]["as_tensor"]["name"] for s in doc["graph_module"]["signature"]["input_specs"]
                if "user_input" in s)
    size = graph["tensor_values"][user]["sizes"][0]["as_expr"]
    size["expr_str"] = f"{size['expr_str']} if {payload(marker)} is None else 0"
    files["models/model.json"] = json.dumps(doc).encode()
    write(dst, root, files)
    return "models/model.json"


def sample_inputs(ep, dst: Path, marker: Path) -> str:
    """Sample inputs that run code when unpickled (torch.export.load retries them with weights_only=False).
    Every archive has this entry: the reader must never read it (the check passes, the marker stays absent)."""
    root, files = entries(ep)
    files["data/sample_inputs/model.pt"] = hostile_torch_save(ep.example_inputs, payload(marker))
    write(dst, root, files)
    return "data/sample_inputs/model.pt"


def guards(ep, dst: Path, marker: Path) -> str:
    """Guards code that opens the marker: ``module()`` compiles the guards with ``exec`` when the program has
    sample inputs. The reader never executes it (the check passes, the marker stays absent)."""
    root, files = entries(ep)
    doc = json.loads(files["models/model.json"])
    doc["guards_code"] = [f"{payload(marker)} is None"]
    files["models/model.json"] = json.dumps(doc).encode()
    write(dst, root, files)
    return "models/model.json"


#: name -> builder; the archive is refused, naming the entry the builder returns
REFUSED = {
    "legacy_weights": legacy_weights,
    "legacy_constants": legacy_constants,
    "second_program": second_program,
    "aoti_library": aoti_library,
    "pre_27_layout": pre_27_layout,
    "use_pickle": use_pickle,
    "opaque_constant": opaque_constant,
    "unknown_entry": unknown_entry,
    "symbolic_expression": symbolic_expression,
}
#: name -> builder; the archive is read (its hostile part never is) and checks as the program it carries
IGNORED = {"sample_inputs": sample_inputs, "guards": guards}
