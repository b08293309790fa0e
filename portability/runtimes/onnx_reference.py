"""onnx.reference: the ONNX project's pure-Python evaluator of the spec (slow; a cross-check, not an oracle)."""
from __future__ import annotations

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import LoadError, RunError
from portability.runtimes.base import Availability, Runtime, modules_present


class OnnxReference(Runtime):
    uses = ("onnx",)
    caveat = "onnx.reference has known wrong kernels; a disagreement with ONNX Runtime does not say which side is right"
    not_a_device = "reference implementation"  # the spec in Python: its speed is no runtime's a user ships

    @classmethod
    def availability(cls) -> Availability:
        return modules_present("onnx", hint=install("portability"))

    def load(self, artifact: Artifact) -> None:
        import onnx
        from onnx.reference import ReferenceEvaluator

        self._version = onnx.__version__
        model = onnx.load(str(artifact.path), load_external_data=True)
        try:
            self.session = ReferenceEvaluator(model)
        except Exception as e:  # e.g. "No implementation for op X"
            op = _op_from(str(e))
            raise LoadError(f"onnx.reference cannot build the graph: {str(e).splitlines()[0]}", op=op) from None
        self._out_names = [o.name for o in model.graph.output]
        self._at = _follow(self.session)

    def describe(self) -> str:
        return f"onnx.reference {self._version}"

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._at[0] = None
        try:
            outs = self.session.run(None, feeds)
        except Exception as e:
            node = self._at[0]
            op, name = (node.op_type, node.onnx_node.name or None) if node is not None else (_op_from(str(e)), None)
            where = (f" at {op}" if op else "") + (f" node '{name}'" if name else "")
            raise RunError(f"onnx.reference failed{where}: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                           op=op, node=name) from None
        return {n: np.asarray(o) for n, o in zip(self._out_names, outs)}


def _follow(session) -> list:
    """A one-item list that holds the node the evaluator runs (its main graph's), to name where it failed."""
    at: list = [None]
    for node in getattr(session, "rt_nodes_", []):
        def run(*args, _run=node.run, _node=node, **kwargs):
            at[0] = _node
            return _run(*args, **kwargs)
        node.run = run
    return at


def _op_from(msg: str) -> str | None:
    import re

    m = re.search(r"(?:op_type|operator|op) ['\"]?(\w+)['\"]?", msg)
    return m.group(1) if m else None
