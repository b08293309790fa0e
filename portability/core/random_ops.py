"""Nodes that draw random numbers: a model that carries them gives other outputs at every run, the
reference's included, so a comparison with it says nothing of a target (an export left in training mode:
its Dropout still drops). The check says so in its notes (``engine/evaluate.py``)."""
from __future__ import annotations

#: ops that always sample
SAMPLING_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                          "Bernoulli"})
#: the most nodes named
MAX_NAMED = 5


def random_nodes(model) -> tuple[str, ...]:
    """``"Op 'name'"`` of every node of the graph (and its subgraphs) that draws random numbers: a sampling op,
    or a Dropout whose ``training_mode`` input is not a constant false (ONNX's Dropout drops only then)."""
    from onnx import numpy_helper

    consts = {t.name: t for t in model.graph.initializer}
    found: list[str] = []
    todo = [model.graph]
    while todo:
        g = todo.pop()
        consts.update({t.name: t for t in g.initializer})
        for n in g.node:
            if n.op_type == "Constant" and n.output:
                value = next((a.t for a in n.attribute if a.name == "value" and a.HasField("t")), None)
                if value is not None:
                    consts[n.output[0]] = value
        for n in g.node:
            if n.op_type in SAMPLING_OPS or (n.op_type == "Dropout" and _training(n, consts, numpy_helper)):
                found.append(f"{n.op_type} '{n.name or n.output[0]}'")
            todo += [a.g for a in n.attribute if a.HasField("g")] + [x for a in n.attribute for x in a.graphs]
    return tuple(found)


def _training(node, consts, numpy_helper) -> bool:
    """A Dropout in training mode: its third input given, and not a constant false."""
    if len(node.input) < 3 or not node.input[2]:
        return False
    t = consts.get(node.input[2])
    try:
        return t is None or bool(numpy_helper.to_array(t).any())
    except Exception:  # a tensor that cannot be read (external data, a broken file): say it may drop
        return True


def note(nodes: tuple[str, ...]) -> str:
    named = ", ".join(nodes[:MAX_NAMED]) + (f" and {len(nodes) - MAX_NAMED} more" if len(nodes) > MAX_NAMED else "")
    return (f"the model draws random numbers ({named}): its outputs change from run to run, the reference's "
            "included, so a drift here says nothing of the targets; a Dropout in training mode is an export made "
            "before model.eval(): export the model in inference mode")
