"""Which TFLite tensor is which ONNX tensor, and in which layout — read from the produced model.

onnx2tf renames tensors (``serving_default_x:0``, ``PartitionedCall:0``), moves channels last (NCHW ->
NHWC, on inputs *and* outputs) and the quantizing converter renames outputs again (``output_0``). None of
that is assumed here: names come from the model's signature (or, without one, from tensor order), layouts
from matching shapes, and a layout the shapes cannot decide (``[1, 3, 3, 3]``) is settled by a probe
inference against ONNX Runtime.

The mapping is plain JSON, stored in ``artifact.meta["tflite_io"]``::

    {"inputs":  [{"onnx": "x", "index": 0, "tensor": "serving_default_x:0", "shape": [1, 5, 7, 3],
                  "dtype": "float32", "to_tflite": [0, 2, 3, 1], "quant": null}],
     "outputs": [{"onnx": "y", "index": 3, ..., "to_onnx": [0, 3, 1, 2], "quant": {"scale": .., "zero_point": ..}}],
     "resolved_by": "shapes" | "probe"}

``to_tflite`` transposes an ONNX-layout input for the interpreter; ``to_onnx`` transposes an interpreter
output back to the ONNX layout (``None`` when only a reshape relates them).
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np

from portability.core.errors import ConvertError

_MAX_PROBE_COMBOS = 32


def candidate_perms(onnx_shape: list, tfl_shape: list, native: bool = False) -> list[tuple[int, ...]]:
    """Permutations ``p`` with ``tfl_shape[i] == onnx_shape[p[i]]``; channel-last first, identity second
    (identity first for a ``native`` file: one written from the source's own layout)."""
    n = len(onnx_shape)
    if n != len(tfl_shape):
        return []
    unknown = lambda d: d is None or d < 0
    strict = lambda a, b: unknown(a) == unknown(b) and (unknown(a) or a == b)
    relaxed = lambda a, b: unknown(a) or unknown(b) or a == b
    for same in (strict, relaxed):  # an unknown dimension pairs with an unknown one first
        found = _perms(onnx_shape, tfl_shape, same)
        if found:
            ident = tuple(range(n))
            return [ident] + [p for p in found if p != ident] if native and ident in found else found
    return []


def _perms(onnx_shape: list, tfl_shape: list, same) -> list[tuple[int, ...]]:
    n = len(onnx_shape)
    preferred = [tuple([0] + list(range(2, n)) + [1]) if n >= 3 else tuple(range(n)), tuple(range(n))]
    others = itertools.permutations(range(n)) if n <= 6 else iter(())
    out, seen = [], set()
    for p in itertools.chain(preferred, others):
        # perms that differ only in where size-1 axes go give the same bytes: keep the first of each
        key = tuple(p[i] for i in range(n) if onnx_shape[p[i]] != 1)
        if key not in seen and all(same(tfl_shape[i], onnx_shape[p[i]]) for i in range(n)):
            seen.add(key)
            out.append(p)
    return out


def _sanitized(name: str) -> set[str]:
    """The spellings onnx2tf may give an ONNX tensor name in a signature."""
    s = name.replace(":", "__")
    return {name, s, re.sub(r"^/", "", s), re.sub(r"[^A-Za-z0-9_.\-/]", "_", s)}


def _match(onnx_tensors: list[dict], details: list[dict], sig: dict[str, int] | None, kind: str) -> list[dict]:
    """Pair ONNX tensors with interpreter tensor details: by signature key, then by position."""
    by_index = {d["index"]: d for d in details}
    pairs: list[dict | None] = [None] * len(onnx_tensors)
    if sig:
        keys = list(sig)
        for i, t in enumerate(onnx_tensors):
            names = _sanitized(t["name"]) | ({f"output_{i}"} if kind == "outputs" else set())
            hit = [k for k in keys if k in names]
            if hit and sig[hit[0]] in by_index:
                pairs[i] = by_index[sig[hit[0]]]
    rest = [d for d in details if d not in pairs]
    for i in range(len(pairs)):
        if pairs[i] is None:
            if not rest:
                raise ConvertError(f"the TFLite model has fewer {kind} than the ONNX model ({len(details)} < {len(onnx_tensors)})")
            pairs[i] = rest.pop(0)
    return pairs  # type: ignore[return-value]


def _quant(d: dict) -> dict | None:
    scale, zp = d["quantization"]
    return {"scale": float(scale), "zero_point": int(zp)} if scale else None


def describe_tflite(tflite: Path, onnx_sig: dict, onnx_path: Path | None = None, native: bool = False) -> dict[str, Any]:
    """The source <-> TFLite mapping of ``tflite`` (see the module doc). ``onnx_path`` enables the probe;
    ``native``: the file keeps the source's layout (a framework's own converter wrote it)."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(tflite), num_threads=1)
    full = getattr(it, "_get_full_signature_list", it.get_signature_list)()
    sig = next(iter(full.values()), None) if full else None
    ins = _match(onnx_sig["inputs"], it.get_input_details(), sig and sig.get("inputs"), "inputs")
    outs = _match(onnx_sig["outputs"], it.get_output_details(), sig and sig.get("outputs"), "outputs")
    io: dict[str, Any] = {"inputs": [], "outputs": [], "resolved_by": "shapes", "signature": bool(sig)}
    key_of = {kind: {v: k for k, v in (sig or {}).get(kind, {}).items()} for kind in ("inputs", "outputs")}
    cands_in, cands_out = [], []
    for t, d in zip(onnx_sig["inputs"], ins):
        shape = [int(x) for x in d.get("shape_signature", d["shape"])]
        c = candidate_perms(t["shape"], shape, native)
        if not c and int(np.prod([x for x in d["shape"]])) != int(np.prod([x or 1 for x in t["shape"]])):
            raise ConvertError(f"input '{t['name']}': TFLite shape {shape} does not match ONNX shape {t['shape']}")
        cands_in.append(c)
        io["inputs"].append({"onnx": t["name"], "index": int(d["index"]), "tensor": d["name"], "shape": shape,
                             "dtype": np.dtype(d["dtype"]).name, "to_tflite": list(c[0]) if c else None, "quant": _quant(d),
                             "key": key_of["inputs"].get(d["index"])})
    for t, d in zip(onnx_sig["outputs"], outs):
        shape = [int(x) for x in d.get("shape_signature", d["shape"])]
        c = candidate_perms(t["shape"], shape, native)
        cands_out.append(c)
        io["outputs"].append({"onnx": t["name"], "index": int(d["index"]), "tensor": d["name"], "shape": shape,
                              "dtype": np.dtype(d["dtype"]).name, "to_onnx": list(np.argsort(c[0])) if c else None,
                              "quant": _quant(d), "key": key_of["outputs"].get(d["index"])})
    for e in io["outputs"]:
        e["to_onnx"] = [int(x) for x in e["to_onnx"]] if e["to_onnx"] is not None else None
    if onnx_path is not None and any(len(c) > 1 for c in cands_in + cands_out):
        _probe(it, io, cands_in, cands_out, onnx_sig, onnx_path)
    return io


def _probe(it, io: dict, cands_in: list, cands_out: list, onnx_sig: dict, onnx_path: Path) -> None:
    """Settle ambiguous layouts: the input/output permutations that reproduce ONNX Runtime best."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {}
    for t in onnx_sig["inputs"]:
        shape = [d or 1 for d in t["shape"]]
        feeds[t["name"]] = (rng.random(shape) if "float" in t["dtype"] else rng.integers(0, 2, shape)).astype(t["dtype"])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    best: tuple[float, tuple, list] | None = None
    combos = itertools.islice(itertools.product(*[c or [None] for c in cands_in]), _MAX_PROBE_COMBOS)
    for combo in combos:
        try:
            xs = []
            for e, p in zip(io["inputs"], combo):
                x = feeds[e["onnx"]]
                xs.append((x.transpose(p) if p is not None else x.reshape([d if d > 0 else 1 for d in e["shape"]])).astype(e["dtype"]))
                it.resize_tensor_input(e["index"], list(xs[-1].shape))
            it.allocate_tensors()
            for e, x in zip(io["inputs"], xs):
                it.set_tensor(e["index"], x)
            it.invoke()
        except Exception:
            continue
        err, outs = 0.0, []
        for e, c, r in zip(io["outputs"], cands_out, ref):
            y = it.get_tensor(e["index"]).astype(np.float64)
            errs = [(float(np.max(np.abs(y.transpose(np.argsort(p)) - r))) if y.size else 0.0, p) for p in c] or [(0.0, None)]
            e_best = min(errs, key=lambda t: t[0])
            err = max(err, e_best[0])
            outs.append(e_best[1])
        if best is None or err < best[0]:
            best = (err, combo, outs)
    if best is None:
        return  # the interpreter could not run here; keep the shape-based guess (the runtime reports the error)
    for e, p in zip(io["inputs"], best[1]):
        e["to_tflite"] = list(p) if p is not None else None
    for e, p in zip(io["outputs"], best[2]):
        e["to_onnx"] = [int(x) for x in np.argsort(p)] if p is not None else None
    io["resolved_by"] = "probe"
