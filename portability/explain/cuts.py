"""The ONNX graph ``localize`` cuts: the nodes in topological order, which tensors cross a cut, the graph up
to a set of tensors, and one node by itself fed with given values (the reproducer)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

_FLOATS = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_IR_CONST_INITS = 4  # the first IR version whose initializers need not be graph inputs


#: ops whose outputs depend on their input's shape, not its values
_SHAPE_OPS = {"Shape", "Size"}


class Graph:
    """The model's graph, as cuts are made of it."""

    def __init__(self, path: Path):
        import onnx

        self.model = onnx.load(str(path))
        g = self.model.graph
        try:
            typed = onnx.shape_inference.infer_shapes(self.model)
        except Exception:  # noqa: BLE001 — types of the graph's own outputs and inputs are enough then
            typed = self.model
        self.types: dict[str, Any] = {v.name: v.type for v in list(typed.graph.value_info) + list(g.input) + list(g.output)}
        self.inits = {i.name for i in g.initializer}
        self.inputs = [i.name for i in g.input if i.name not in self.inits]
        self.nodes = list(g.node)
        self._fill_ranks()
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for t in n.input:
                self.consumers.setdefault(t, []).append(i)
        for o in g.output:
            self.consumers.setdefault(o.name, []).append(len(self.nodes))
        #: the tensors the graph's inputs reach. A subgraph of constants (an old model's weights made by
        #: ``ConstantOfShape``) is no place to cut and no cut's output: such a cut has nothing to feed,
        #: converters fold constants away (the cut would lose those outputs), and they are alike everywhere
        #: A tensor made from the inputs' shapes alone (``Shape`` → ``Gather`` → ``Range``: a detector's anchor
        #: grid) is no cut's output either: the check's shapes are fixed, so converters fold it to a constant
        self.live = set(self.inputs)
        for n in self.nodes:  # ONNX graphs are in topological order
            if n.op_type in _SHAPE_OPS:
                continue
            if any(x in self.live for x in [x for x in n.input if x] + [x for a in n.attribute if a.type == a.GRAPH
                                                                      for x in _outer(a.g)]):
                self.live.update(o for o in n.output if o)

    def _fill_ranks(self) -> None:
        """The ranks ONNX's shape inference leaves unknown (a Reshape to a computed shape, a Squeeze of computed
        axes), from ONNX Runtime's symbolic shape inference (it reads the graph, runs none of it): a tensor
        needs a rank to be a cut's output. Those it cannot tell either stay out of the cuts (``floats``)."""
        from onnx import helper

        unranked = {o for n in self.nodes for o in n.output if o in self.types and self.types[o].HasField("tensor_type")
                    and not self.types[o].tensor_type.HasField("shape")}
        if not unranked:
            return
        try:
            from portability.converters.ort_tools import ort_tool

            SymbolicShapeInference = ort_tool("symbolic_shape_infer").SymbolicShapeInference

            typed = SymbolicShapeInference.infer_shapes(self.model, auto_merge=True)
        except Exception:  # noqa: BLE001 — an op it does not know: those tensors stay unranked
            return
        for v in (typed.graph.value_info if typed is not None else []):
            if v.name in unranked and v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
                rank = len(v.type.tensor_type.shape.dim)
                self.types[v.name] = helper.make_tensor_type_proto(self.types[v.name].tensor_type.elem_type, [None] * rank)

    def floats(self, i: int) -> list[str]:
        """Node ``i``'s float outputs of a known type and rank (what can be compared: a tensor whose rank shape
        inference could not tell cannot be a graph's output)."""
        return [o for o in self.nodes[i].output if o and self.ranked(o) and self.types[o].tensor_type.elem_type in _FLOATS]

    def ranked(self, name: str) -> bool:
        """Whether tensor ``name`` has a known type and rank (what a cut's output must declare)."""
        t = self.types.get(name)
        return t is not None and t.HasField("tensor_type") and t.tensor_type.HasField("shape")

    def cut_points(self) -> list[int]:
        """The nodes a bisection may cut after: those with a float output that the graph's inputs reach."""
        return [i for i in range(len(self.nodes)) if any(o in self.live for o in self.floats(i))]

    def frontier(self, k: int) -> list[str]:
        """Float tensors made by nodes ``<= k`` from the inputs that a later node (or the graph's output) reads."""
        return [o for i in range(k + 1) for o in self.floats(i)
                if o in self.live and any(c > k for c in self.consumers.get(o, ()))]

    def depends_on_input(self, name: str) -> bool:
        seen, todo = set(), [name]
        while todo:
            t = todo.pop()
            if t in self.inputs:
                return True
            if t in seen or t not in self.producer:
                continue
            seen.add(t)
            n = self.nodes[self.producer[t]]
            todo += [x for x in n.input if x] + [x for a in n.attribute if a.type == a.GRAPH for x in _outer(a.g)]
        return False

    def cut(self, outputs: list[str], path: Path) -> Path:
        """The graph up to ``outputs`` (the nodes they need, the initializers those read) saved at ``path``."""
        import onnx
        from onnx import helper

        need, keep, todo = set(), set(), list(outputs)
        while todo:
            t = todo.pop()
            if t in need:
                continue
            need.add(t)
            if t in self.producer:
                i = self.producer[t]
                if i not in keep:
                    keep.add(i)
                    n = self.nodes[i]
                    todo += [x for x in n.input if x] + [x for a in n.attribute if a.type == a.GRAPH for x in _outer(a.g)]
        g = self.model.graph
        graph = helper.make_graph(
            [self.nodes[i] for i in sorted(keep)], g.name or "cut",
            [i for i in g.input if i.name not in self.inits],  # every input stays: feeds are the model's
            [helper.make_value_info(o, self.types[o]) for o in outputs],
            [t for t in g.initializer if t.name in need])
        m = helper.make_model(graph, opset_imports=self.model.opset_import, ir_version=self.ir_version())
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(m, str(path))
        return path

    def ir_version(self) -> int:
        """The IR version a cut or a reproducer is stamped with. Before IR 4 every initializer must also be
        a graph input (an overridable default); a cut lists only the model's real inputs, so an older model's
        cut is raised to IR 4, which reads every opset of the older IRs, and its weights stay constants."""
        return max(int(self.model.ir_version), _IR_CONST_INITS)

    def node_alone(self, i: int, values: dict[str, np.ndarray], path: Path) -> tuple[Path, dict[str, np.ndarray]]:
        """Node ``i`` by itself: inputs that do not depend on the model's inputs (and are the same for every
        batch) become initializers; the others graph inputs fed with ``values`` (the reference's, stacked
        over batches). Returns the file and its feeds."""
        import onnx
        from onnx import helper, numpy_helper

        n = self.nodes[i]
        g = self.model.graph
        inits = {t.name: t for t in g.initializer}
        fed, consts, feeds = [], [], {}
        for x in dict.fromkeys(t for t in list(n.input) + [t for a in n.attribute if a.type == a.GRAPH for t in _outer(a.g)] if t):
            if x in inits:
                consts.append(inits[x])
            elif x in values and (self.depends_on_input(x) or not _same_per_batch(values[x])):
                fed.append(self._input_type(x, values[x]))
                feeds[x] = values[x]
            elif x in values:
                consts.append(numpy_helper.from_array(np.asarray(values[x][0]), x))
            else:
                raise KeyError(x)
        outs = [helper.make_value_info(o, self.types[o]) for o in self.floats(i)]
        graph = helper.make_graph([n], "reproducer", fed, outs, consts)
        m = helper.make_model(graph, opset_imports=self.model.opset_import, ir_version=self.ir_version())
        onnx.save(m, str(path))
        return path, feeds

    def _input_type(self, x: str, value):
        """A reproducer's graph input ``x``: its inferred type, else the type and rank of its value (one batch's)."""
        from onnx import helper

        if self.ranked(x):
            return helper.make_value_info(x, self.types[x])
        one = np.asarray(value[0])
        return helper.make_tensor_value_info(x, helper.np_dtype_to_tensor_dtype(one.dtype), [None] * one.ndim)

    def describe(self, i: int) -> dict:
        n = self.nodes[i]
        return {"index": i, "node": n.name or None, "op_type": n.op_type, "outputs": self.floats(i)}


def _outer(g) -> list[str]:
    """Names a subgraph reads from the scope around it."""
    made = {o for n in g.node for o in n.output} | {i.name for i in g.input} | {t.name for t in g.initializer}
    out = []
    for n in g.node:
        out += [x for x in n.input if x and x not in made]
        out += [x for a in n.attribute if a.type == a.GRAPH for x in _outer(a.g) if x not in made]
    return out


def _same_per_batch(a: Any) -> bool:
    if isinstance(a, list):
        return all(np.array_equal(a[0], x) for x in a[1:])
    return bool(a.shape[0] <= 1 or all(np.array_equal(a[0], a[j]) for j in range(1, a.shape[0])))
