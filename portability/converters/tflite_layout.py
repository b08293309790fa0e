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
     "resolved_by": "shapes" | "probe" | "documented (probe inconclusive)",
     "probe": {"error": .., "next_error": .., "tolerance": .., "conclusive": true}}

A probe settles a layout only when a candidate reproduces ONNX Runtime: a wrong file's error tells layouts
apart no better than a coin, and the converter's documented layout (onnx2tf: NCHW -> NHWC) stays, with a
note. Each file's layout is resolved on that file (a SavedModel by TensorFlow, onnx2tf's float ``.tflite``
files by LiteRT), never lent from a sibling; a file TensorFlow's converter makes from a SavedModel (the
quantized variants, TF.js) keeps the layouts of the SavedModel it is made from.

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
    """The spellings onnx2tf may give an ONNX tensor name in a signature (a name that starts with ``/``, as
    torch.onnx's do, becomes ``wa/...``: a TensorFlow name cannot start with a slash; a SavedModel's
    signature key has no dots: Optimum's ``past_key_values.0.key`` becomes ``past_key_values_0_key``)."""
    s = name.replace(":", "__")
    spellings = {name, s, re.sub(r"^/", "", s), re.sub(r"[^A-Za-z0-9_.\-/]", "_", s), re.sub(r"[^A-Za-z0-9_\-/]", "_", s)}
    return spellings | {"wa" + x for x in spellings if x.startswith("/")}


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


def _candidates(io: dict, onnx_sig: dict, native: bool = False) -> tuple[list, list]:
    """The layouts the shapes allow for each input and output of a mapping (the documented one first)."""
    return ([candidate_perms(t["shape"], e["shape"], native) for t, e in zip(onnx_sig["inputs"], io["inputs"])],
            [candidate_perms(t["shape"], e["shape"], native) for t, e in zip(onnx_sig["outputs"], io["outputs"])])


def _reference(onnx_sig: dict, onnx_path: Path) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Seeded probe feeds (ONNX layout) and ONNX Runtime's outputs for them."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {}
    for t in onnx_sig["inputs"]:
        shape = [d or 1 for d in t["shape"]]
        feeds[t["name"]] = (rng.random(shape) if "float" in t["dtype"] else rng.integers(0, 2, shape)).astype(t["dtype"])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return feeds, ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _interpreter_run(it, io: dict):
    """A LiteRT interpreter as the probe's ``run``: file-layout inputs in, its outputs in ``io`` order out."""
    def run(xs: list[np.ndarray]) -> list[np.ndarray]:
        for e, x in zip(io["inputs"], xs):
            it.resize_tensor_input(e["index"], list(x.shape))
        it.allocate_tensors()
        for e, x in zip(io["inputs"], xs):
            it.set_tensor(e["index"], x)
        it.invoke()
        return [it.get_tensor(e["index"]) for e in io["outputs"]]
    return run


def _probe(it, io: dict, cands_in: list, cands_out: list, onnx_sig: dict, onnx_path: Path) -> None:
    feeds, ref = _reference(onnx_sig, onnx_path)
    settle(_interpreter_run(it, io), io, cands_in, cands_out, feeds, ref)


#: a probe settles a layout only when its best candidate reproduces ONNX Runtime to this share of the
#: outputs' largest magnitude, and clearly better than (at most half the error of) a different candidate
PROBE_RTOL = 1e-2


def _probe_error(y: np.ndarray, perm, ref) -> float:
    """How far a file's output, read back through ``perm``, is from ONNX Runtime's (inf where that reading
    does not even give the reference's shape: no candidate)."""
    if not y.size:
        return 0.0
    back = y.transpose(np.argsort(perm))
    r = np.asarray(ref, np.float64)
    return float(np.max(np.abs(back - r))) if back.shape == r.shape else float("inf")


def settle(run, io: dict, cands_in: list, cands_out: list, feeds: dict[str, np.ndarray], ref: list[np.ndarray]) -> None:
    """Settle ambiguous layouts with a probe: ``run`` (file-layout inputs -> outputs in ``io`` order) on
    ``feeds`` against ONNX Runtime's ``ref``. A candidate that reproduces ``ref`` wins (of several that do
    equally well, the documented layout: candidates come in that order); when none does, the file computes
    something else (a wrong conversion) and its error cannot tell layouts apart: the probe is inconclusive,
    the documented layout (the first candidate) stays, and ``io["probe"]`` says so."""
    tried: list[tuple[float, tuple, list]] = []
    for combo in itertools.islice(itertools.product(*[c or [None] for c in cands_in]), _MAX_PROBE_COMBOS):
        try:
            xs = [(feeds[e["onnx"]].transpose(p) if p is not None else feeds[e["onnx"]].reshape(
                [d if d > 0 else 1 for d in e["shape"]])).astype(e["dtype"]) for e, p in zip(io["inputs"], combo)]
            ys = run(xs)
        except Exception:  # noqa: BLE001 — a layout the file refuses is no candidate
            continue
        err, outs = 0.0, []
        for y, c, r in zip(ys, cands_out, ref):
            y = np.asarray(y, np.float64)
            errs = [(_probe_error(y, p, r), p) for p in c] or [(0.0, None)]
            e_best = min(errs, key=lambda t: t[0])
            err = max(err, e_best[0])
            outs.append(e_best[1])
        tried.append((err, combo, outs))
    if not tried:
        return  # the file could not run here; keep the shape-based guess (the runtime reports the error)
    scale = max((float(np.max(np.abs(np.asarray(r, np.float64)))) for r in ref if np.size(r)), default=0.0)
    tol = PROBE_RTOL * scale + 1e-6
    best = min(tried, key=lambda t: t[0])
    chosen = next(t for t in tried if t[0] <= 2 * best[0] + 1e-6)  # of equals, the documented (first tried)
    others = [t[0] for t in tried if t is not best]
    io["probe"] = {"error": best[0], "next_error": min(others) if others else None, "tolerance": tol,
                   "conclusive": best[0] <= tol}
    if best[0] > tol:
        io["resolved_by"] = "documented (probe inconclusive)"
        return
    for e, p in zip(io["inputs"], chosen[1]):
        e["to_tflite"] = list(p) if p is not None else None
    for e, p in zip(io["outputs"], chosen[2]):
        e["to_onnx"] = [int(x) for x in np.argsort(p)] if p is not None else None
    io["resolved_by"] = "probe"


def layout_notes(io: dict, what: str) -> list[str]:
    """The notes an artifact carries about its layout: an inconclusive probe, said in one line."""
    p = io.get("probe") or {}
    if p.get("conclusive", True):
        return []
    return [f"{what}'s input/output layout could not be told by a probe (its best candidate is off from ONNX Runtime "
            f"by {p['error']:.3g}, over the tolerance {p['tolerance']:.3g}): the converter's documented layout is used"]


def describe_savedmodel(folder: Path, tflite_io: dict, onnx_sig: dict, onnx_path: Path) -> dict[str, Any]:
    """The mapping of a SavedModel whose ``serving_default`` signature has the tensors and keys of the
    ``.tflite`` file described by ``tflite_io``, its layouts resolved on the SavedModel itself: the shapes'
    documented layout, and where the shapes leave a choice, a probe run by TensorFlow — never the
    ``.tflite`` file's probe, which a wrong file can mislead."""
    import copy

    io = copy.deepcopy(tflite_io)
    io.pop("probe", None)
    io["resolved_by"] = "shapes"
    cands_in, cands_out = _candidates(io, onnx_sig)
    for e, c in zip(io["inputs"], cands_in):
        e["to_tflite"] = list(c[0]) if c else None
    for e, c in zip(io["outputs"], cands_out):
        e["to_onnx"] = [int(x) for x in np.argsort(c[0])] if c else None
    if any(len(c) > 1 for c in cands_in + cands_out):
        feeds, ref = _reference(onnx_sig, onnx_path)
        settle(_savedmodel_run(folder, io), io, cands_in, cands_out, feeds, ref)
    return io


def _savedmodel_run(folder: Path, io: dict):
    """A SavedModel's ``serving_default`` as the probe's ``run``: inputs by the ``.tflite`` signature's keys
    (or a spelling of the ONNX name, or the one key left), outputs by key or onnx2tf's ``output_<i>``."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    fn = tf.saved_model.load(str(folder)).signatures["serving_default"]
    names = sorted(fn.structured_input_signature[1])
    keys = [next((k for k in [e.get("key")] + sorted(_sanitized(e["onnx"])) if k in names), None) for e in io["inputs"]]
    left = [k for k in names if k not in keys]
    keys = [k if k is not None else (left.pop(0) if len(left) == 1 else None) for k in keys]
    if None in keys:
        raise ConvertError(f"no SavedModel signature input for each ONNX input (signature inputs: {names})")
    outs = [e["key"] if e.get("key") in fn.structured_outputs else f"output_{i}" for i, e in enumerate(io["outputs"])]

    def run(xs: list[np.ndarray]) -> list[np.ndarray]:
        res = fn(**{k: tf.constant(x) for k, x in zip(keys, xs)})
        return [res[k].numpy() for k in outs]
    return run


def describe_float_files(files: dict[str, Path], folder: Path, onnx_sig: dict, onnx_path: Path) -> tuple[dict, dict]:
    """onnx2tf's float ``.tflite`` files' mappings (``files``: quantization -> file), each resolved on that
    file — a wrong file must not lend its probe's guess —, and its SavedModel's (in ``folder``), resolved on the
    SavedModel from the fp32 file's tensors and keys."""
    float_io = {q: describe_tflite(f, onnx_sig, onnx_path=onnx_path) for q, f in files.items()}
    return float_io, describe_savedmodel(folder, float_io["fp32"], onnx_sig, onnx_path)
