"""Give an exported ONNX graph the source's input and output names (exporters name them their own way:
``image:0``, ``linear_1``), so that every ONNX runtime is fed and read by the source's names."""
from __future__ import annotations

from pathlib import Path

from portability.core.errors import ConvertError


def _strip(name: str) -> str:
    return name.split(":")[0]


def pairs(have: list[str], want: list[str], kind: str) -> dict[str, str]:
    """old -> new: by name (ignoring a ``:0`` suffix), else by position."""
    if len(have) != len(want):
        raise ConvertError(f"the exported ONNX graph has {len(have)} {kind}, the source {len(want)}: {have}")
    out = {}
    rest = [h for h in have if _strip(h) not in want]
    for w in want:
        hit = next((h for h in have if _strip(h) == w), None)
        out[hit if hit is not None else rest.pop(0)] = w
    return out


def rename_io(path: Path, sig: dict) -> dict[str, str]:
    """Rename ``path``'s graph inputs and outputs in place to ``sig``'s names; returns what changed."""
    import onnx

    model = onnx.load(str(path))
    g = model.graph
    inits = {i.name for i in g.initializer}
    mapping = pairs([i.name for i in g.input if i.name not in inits], [t["name"] for t in sig["inputs"]], "inputs")
    mapping.update(pairs([o.name for o in g.output], [t["name"] for t in sig["outputs"]], "outputs"))
    mapping = {k: v for k, v in mapping.items() if k != v}
    if not mapping:
        return {}
    # a wanted name an inner value of the graph holds already (a torch.export program names its output after
    # its last FX node, ``view_23``, and the exporter its values alike): that value gets a fresh name first
    taken = {x for n in _all_nodes(g) for x in (*n.input, *n.output)} | inits | {i.name for i in g.input}
    for new in set(mapping.values()) & (taken - set(mapping)):
        fresh = next(f"{new}__{k}" for k in range(1, 1 << 20) if f"{new}__{k}" not in taken)
        taken.add(fresh)
        mapping = {new: fresh, **mapping}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = mapping.get(vi.name, vi.name)
    for node in _all_nodes(g):
        node.input[:] = [mapping.get(x, x) for x in node.input]
        node.output[:] = [mapping.get(x, x) for x in node.output]
    onnx.save_model(model, str(path))
    return mapping


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _all_nodes(sub)
