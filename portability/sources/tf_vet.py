"""Vetting one meta graph of a SavedModel against the op allow-list (``tf_ops``), before TensorFlow loads it.

What TensorFlow 2.21's ``tf.saved_model.load`` runs: for a TF2 SavedModel, the object graph's functions
(resource creation and initialization, restore functions, the signatures) and never the ``saver_def``'s
nodes; for a TF1 SavedModel (no object graph), the ``saver_def``'s restore op with the variables' prefix
fed in, and the init op with the asset paths fed in. So the graph's own nodes split in three: the restore
closure (every node the restore op depends on), the save closure (what only the save tensor depends on:
no loader runs it), and the model (everything else). Functions split the same way: a function is a
restore (save) function only when nothing but the restore (save) closure reaches it.

Model nodes and functions hold only ``tf_ops.PURE`` ops (a print only to a standard stream; a text-file
lookup table only from an asset path: a function's argument or a graph's asset tensor, never a constant
or a computed string); checkpoint reads only in the restore closure on the prefix the loader feeds,
checkpoint writes only in the save closure. A call to a function the library does not hold is refused.
Asset files (``asset_file_def`` and TF1's ``saved_model_assets`` collection) must lie inside ``assets/``.
"""
from __future__ import annotations

from pathlib import Path

from portability.sources.tf_ops import PRINT, PRINT_STREAMS, PURE, RESTORE_OPS, SAVE_OPS, TEXT_TABLE, why_refused

#: ops that pass a tensor through unchanged (followed when asking where a path comes from)
_PASS = {"Identity", "IdentityN", "Snapshot", "StopGradient", "EnsureShape", "CheckNumerics"}


def _node_name(ref: str) -> str:
    return ref.lstrip("^").split(":")[0]


def _func_refs(node) -> set[str]:
    """Names of the functions a node calls (any function-valued attribute: f, then_branch, body, ...)."""
    out = set()
    for a in node.attr.values():
        if a.HasField("func") and a.func.name:
            out.add(a.func.name)
        if a.HasField("list"):
            out |= {f.name for f in a.list.func if f.name}
    return out


def _ancestors(nodes: dict, roots: list[str]) -> set[str]:
    seen: set[str] = set()
    stack = [_node_name(r) for r in roots if r]
    while stack:
        n = stack.pop()
        if n in seen or n not in nodes:
            continue
        seen.add(n)
        stack.extend(_node_name(i) for i in nodes[n].input)
    return seen


def _reach(lib: dict, roots: set[str]) -> set[str]:
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        f = stack.pop()
        if f in seen or f not in lib:
            continue
        seen.add(f)
        for n in lib[f].node_def:
            stack.extend(_func_refs(n))
    return seen


def _source(nodes: dict, ref: str, args: set[str]):
    """Where a tensor comes from, through pass-through ops: "arg" (a function argument), or the node."""
    seen = set()
    name = _node_name(ref)
    while name not in seen:
        seen.add(name)
        if name in args:
            return "arg"
        n = nodes.get(name)
        if n is None or n.op not in _PASS or not n.input:
            return n
        name = _node_name(n.input[0])
    return None


def _asset_files(mg) -> list:
    from tensorflow.core.protobuf import meta_graph_pb2

    files = list(mg.asset_file_def)
    for v in mg.collection_def["saved_model_assets"].any_list.value if "saved_model_assets" in mg.collection_def else []:
        a = meta_graph_pb2.AssetFileDef()
        if v.Unpack(a):
            files.append(a)
    return files


def _assets(files, folder: Path) -> str | None:
    base = (folder / "assets").resolve()
    for a in files:
        name = a.filename
        if not name or name.startswith("/") or "\\" in name or ".." in Path(name).parts:
            return f"the asset file '{name[:80]}' is not a plain name inside the folder's assets/"
        real = (base / name).resolve()
        if real != base and base not in real.parents:
            return f"the asset file '{name[:80]}' resolves outside the folder's assets/ (symlink?)"
    return None


def _op_refusal(node, nodes: dict, args: set[str], assets: set[str], lib: dict, role: str) -> str | None:
    """Why this node may not be where it is (``role``: model, restore or save), or None."""
    op = node.op
    missing = sorted(f for f in _func_refs(node) if f not in lib)
    if missing:
        return f"a call to '{missing[0][:60]}', which is not a function of the model"
    if op in PURE or (role == "save" and op in SAVE_OPS):
        return None
    if op in PRINT:
        stream = node.attr["output_stream"].s.decode(errors="replace") if "output_stream" in node.attr else "stderr"
        return None if stream in PRINT_STREAMS else f"the op {op}, which prints to '{stream[:80]}' (a file)"
    if op in TEXT_TABLE or (role == "restore" and op in RESTORE_OPS):
        src = _source(nodes, node.input[1] if op in TEXT_TABLE else node.input[0], args) if len(node.input) > 1 else None
        if src == "arg" or (src is not None and src != "arg" and src.name in assets):
            return None
        what = "a lookup table from a text file" if op in TEXT_TABLE else "a checkpoint"
        return f"the op {op}, which reads {what} from a path that is not an asset or the loader's own"
    return f"the op {op} ({why_refused(op)})"


def refusal(mg, folder: Path) -> str | None:
    """Why the meta graph ``mg`` (a MetaGraphDef) of the SavedModel in ``folder`` is refused, or None."""
    files = _asset_files(mg)
    why = _assets(files, folder)
    if why:
        return why
    assets = {_node_name(a.tensor_info.name) for a in files if a.tensor_info.name}
    nodes = {n.name: n for n in mg.graph_def.node}
    lib = {f.signature.name: f for f in mg.graph_def.library.function}
    sd = mg.saver_def
    restore = _ancestors(nodes, [sd.restore_op_name])
    save = _ancestors(nodes, [sd.save_tensor_name]) - restore
    assets |= {_node_name(sd.filename_tensor_name)} if sd.filename_tensor_name else set()
    roles = {n: "restore" if n in restore else "save" if n in save else "model" for n in nodes}
    refs = {role: {f for n, r in roles.items() if r == role for f in _func_refs(nodes[n])} for role in ("restore", "save")}
    model_roots = {f for n, r in roles.items() if r == "model" for f in _func_refs(nodes[n])}
    model_roots |= set(mg.object_graph_def.concrete_functions)
    restore_fns, save_fns = _reach(lib, refs["restore"]), _reach(lib, refs["save"])
    model_roots |= {f for f in lib if f not in restore_fns and f not in save_fns}  # reached from nowhere: model code
    model_fns = _reach(lib, model_roots)
    found: dict[str, str] = {}  # refusal -> where first seen
    for n in nodes.values():
        why = _op_refusal(n, nodes, set(), assets, lib, roles[n.name])
        if why:
            found.setdefault(why, f"its graph's node '{n.name[:60]}'")
    for name, fn in sorted(lib.items()):
        role = "model" if name in model_fns else "restore" if name in restore_fns and name not in save_fns else \
            "save" if name in save_fns and name not in restore_fns else "model"
        fnodes = {n.name: n for n in fn.node_def}
        args = {a.name for a in fn.signature.input_arg}
        for n in fn.node_def:
            why = _op_refusal(n, fnodes, args, set(), lib, role)
            if why:
                found.setdefault(why, f"its function '{name[:60]}'")
    if not found:
        return None
    (why, where), *more = sorted(found.items())
    return f"{where} uses {why}" + (f"; and {len(more)} more: " + ", ".join(w.split(' (')[0].split(', which')[0]
                                                                           .removeprefix('the op ') for w, _ in more)
                                   if more else "")
