"""``audit --onnx-conformance``: ONNX's own node test cases as an audit corpus, with the spec's outputs.

``onnx.backend.test.case.node.collect_testcases()`` regenerates, from the installed onnx package, every
single-op model of the ONNX backend tests with its inputs and the outputs the spec says it gives. The
corpus is written once per onnx version in the cache (``<cache>/onnx-conformance/<version>/``): per case a
folder with ``model.onnx``, ``inputs.npz`` (one batch) and ``expected.npz``. Each case is then checked as
any model is (the reference runtime and every target), and every target's outputs are also compared with
the expected ones (:func:`against_spec`): a second reference, the spec's, beside the reference runtime.

A case stamped with a newer IR version or opset than the reference runtime reads is converted down to what
it reads (``audit/lowering.py``), or, with one case per op, gives way to the op's next case that can be; each
such case's record (from and to which versions, or why it still cannot be) is in ``versions.json`` and in
its audit result.

A case whose inputs or outputs are not plain tensors (sequences, optionals, strings) cannot be fed through
a ``.npz`` of arrays; it is left out and listed with its reason (``left_out.json``).
"""
from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path

import numpy as np

from portability.core.errors import UsageError

log = logging.getLogger(__name__)

#: ``one``: the first case of each op type that is not a function expansion; ``all``: every case
CASES = ("one", "all")


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def _op_of(case, ops_by_name: dict[str, str]) -> str:
    """The op type a case tests: its one node's, or the node named in the case's name; an expansion's is its
    original's."""
    name = case.name.removeprefix("test_")
    if name.endswith("_expanded") or "_expanded_" in name:
        base = "test_" + name.split("_expanded")[0]
        if base in ops_by_name:
            return ops_by_name[base]
    nodes = list(case.model.graph.node)
    if len(nodes) == 1:
        return nodes[0].op_type
    key = _norm(name)
    named = [n.op_type for n in nodes if _norm(n.op_type) and key.startswith(_norm(n.op_type))]
    return max(named, key=len) if named else nodes[-1].op_type


#: what a ``.npz`` holds and every runtime reads (bfloat16, float8 and int4 are ml_dtypes types)
_NUMERIC = {np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
            np.float16, np.float32, np.float64}


def _array(value):
    """A case's value as an array (numpy scalars and TensorProtos too), or the value itself."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if type(value).__name__ == "TensorProto":
        from onnx import numpy_helper

        try:
            return numpy_helper.to_array(value)
        except Exception:  # noqa: BLE001 - a type numpy cannot hold
            return value
    return value


def _plain(value) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.type in _NUMERIC


def _tensor_io(model) -> bool:
    return all(v.type.HasField("tensor_type") for v in list(model.graph.input) + list(model.graph.output))


def collect():
    """Every node test case of the installed onnx package (quietly: the generators compute with warnings)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return collect_testcases()


def build(folder: Path, ops: list[str] | None = None, cases: str = "one"):
    """Write the corpus under ``folder`` (once: an existing case folder is reused); return
    ``(items, left_out)``: the audit items, in op order, and ``{case name: reason}`` of the cases left out."""
    import onnx

    from portability.audit.corpus import Item

    if cases not in CASES:
        raise UsageError(f"--cases must be one of {', '.join(CASES)}, got '{cases}'")
    every = collect()
    ops_by_name: dict[str, str] = {}
    for c in every:
        if len(c.model.graph.node) == 1:
            ops_by_name[c.name] = c.model.graph.node[0].op_type
    wanted = {_norm(o): o for o in ops} if ops else None
    picked: dict[str, list] = {}
    for c in sorted(every, key=lambda c: c.name):
        op = _op_of(c, ops_by_name)
        if wanted is not None and _norm(op) not in wanted:
            continue
        picked.setdefault(op, []).append(c)
    if wanted is not None:
        unknown = sorted(set(wanted) - {_norm(o) for o in picked})
        if unknown:
            known = sorted({_op_of(c, ops_by_name) for c in every})
            raise UsageError(f"--ops: no conformance case tests {', '.join(wanted[u] for u in unknown)} "
                             f"(the installed onnx {onnx.__version__} has cases for {len(known)} op types, e.g. {', '.join(known[:8])})")
    folder = Path(folder) / onnx.__version__
    folder.mkdir(parents=True, exist_ok=True)
    from portability.audit import lowering

    reads = lowering.limits()
    items: list[Item] = []
    left_out: dict[str, str] = {}
    for op in sorted(picked, key=str.lower):
        for c, model, record in _pick(picked[op], cases, reads, left_out):
            d = _write(folder, c, model)
            items.append(Item(d / "model.onnx", {"inputs": str(d / "inputs.npz")}, expected=d / "expected.npz",
                              name=c.name, op=op, tolerance=(float(c.rtol), float(c.atol)), versions=record))
    (folder / "left_out.json").write_text(json.dumps(left_out, indent=1, sort_keys=True) + "\n")
    doc = {"reader": reads, "cases": {i.name: i.versions for i in items if i.versions}}
    (folder / "versions.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return items, left_out


def _pick(op_cases: list, cases: str, reads: dict | None, left_out: dict[str, str]) -> list[tuple]:
    """``[(case, model, versions record)]`` of one op: every fit case (``all``), or the first fit one that
    is not a function expansion (``one``). A case stamped newer than the reference reads is converted down;
    with ``one``, a case that cannot be gives way to the op's next case that the reference reads, and is
    kept as it is (its record says why) where no case of the op can."""
    from portability.audit import lowering

    out: list[tuple] = []
    refused = None
    for c in op_cases:
        why = _unfit(c)
        if why:
            left_out[c.name] = why
            continue
        if cases == "one" and ("_expanded" in c.name) and any("_expanded" not in o.name for o in op_cases):
            continue
        model, record = c.model, None
        if reads is not None and lowering.newer(c.model, reads):
            try:
                model, record = lowering.lower(c.model, reads)
            except lowering.Unreadable as e:
                record = {"from": lowering.versions(c.model), "refused": str(e)}
        if cases == "all":
            out.append((c, model, record))
            continue
        if record and "refused" in record:
            refused = refused or (c, model, record)
            continue
        if refused is not None:
            record = {**(record or {}), "instead_of": refused[0].name, "why": refused[2]["refused"]}
        return [(c, model, record)]
    if cases == "one" and refused is not None:
        return [refused]
    if cases == "one" and op_cases:
        left_out.setdefault(op_cases[0].name, "no case of this op can be fed as arrays")
    return out


def _write(folder: Path, case, model) -> Path:
    """The case's folder: its inputs and expected outputs (written once), and its model (rewritten where
    the one there differs, e.g. converted down for another reader)."""
    d = folder / case.name
    d.mkdir(exist_ok=True)
    if not (d / "expected.npz").is_file():
        inputs, outputs = case.data_sets[0]
        ins = [v.name for v in case.model.graph.input]
        outs = [v.name for v in case.model.graph.output]
        np.savez(d / "inputs.npz", **{n: _array(a) for n, a in zip(ins, inputs)})
        np.savez(d / ".expected.npz", **{n: _array(a) for n, a in zip(outs, outputs)})
        (d / ".expected.npz").replace(d / "expected.npz")
    data = model.SerializeToString()
    path = d / "model.onnx"
    if not path.is_file() or path.read_bytes() != data:
        (d / ".model.onnx").write_bytes(data)
        (d / ".model.onnx").replace(path)
    return d


def _unfit(case) -> str | None:
    """Why a case cannot go through a check's ``.npz`` inputs (None when it can)."""
    if not case.data_sets:
        return "no input data"
    inputs, outputs = case.data_sets[0]
    if not _tensor_io(case.model):
        return "inputs or outputs are sequences, maps or optionals"
    if len(inputs) != len(case.model.graph.input) or len(outputs) != len(case.model.graph.output):
        return "its data does not match its graph's inputs and outputs"
    for v in map(_array, list(inputs) + list(outputs)):
        if not _plain(v):
            kind = str(v.dtype) if isinstance(v, np.ndarray) else "None" if v is None else type(v).__name__
            return f"a value that is not a numeric tensor ({kind})"
    return None


def against_spec(targets: list[dict], outputs: dict, expected_path: Path, tolerance: tuple[float, float] | None) -> None:
    """Add ``spec`` to each target that ran (in place): ``{"agrees", "max_abs", "problems"}``. It agrees when
    each output is within the case's own tolerance (``|got - expected| <= atol + rtol * |expected|``, as
    ONNX's backend tests demand) or within the target's drift thresholds against the expected outputs."""
    from portability.metrics import drift
    from portability.metrics.bounds import SPEC

    with np.load(expected_path, allow_pickle=False) as z:
        expected = {k: z[k] for k in z.files}
    for t in targets:
        got = outputs.get(t["id"])
        if got is None:
            continue
        problems: list[str] = []
        ref, cand = {}, {}
        for name, exp in expected.items():
            g = got.get(name)
            if g is None:
                problems.append(f"output '{name}' is missing")
                continue
            g = g[0] if isinstance(g, list) else np.asarray(g)
            if g.size != exp.size:
                problems.append(f"output '{name}' has {g.size} values, the spec {exp.size}")
                continue
            ref[name], cand[name] = exp[None], g.reshape((1, *exp.shape))
        j = drift.judge(t.get("thresholds") or {}, ref, cand, rule=SPEC, tolerance=tolerance or (1e-3, 1e-7))
        t["spec"] = {"agrees": not problems and j.agrees, "max_abs": j.tolerance_max_abs, "problems": problems}
