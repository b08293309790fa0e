"""Quantization rescue: where a quantized variant's error comes from, and the smallest float fallback that passes.

``portability quantize-report MODEL --target T`` and, for a quantized target that drifts, ``fix`` / ``check
--fix``. Every figure comes from checks of the model as ``check`` makes them (the target's own converter, its
runtime, in the isolated workers; one session for them all), on the same inputs:

- **Candidates**: the nodes the target's quantizing converter reduces the precision of (its
  ``quantizable_nodes``: ONNX Runtime's QDQ or integer-ops registries, the float16 converter's nodes outside
  its block list, the MatMuls MatMulNBits replaces, the TFLite converter's layers).
- **Per-layer SNR**: the graph cut with every candidate's output as an output, checked on the target: each
  quantized tensor (dequantized, as the next layer reads it) against the float model's on the same inputs, in
  dB (``metrics.drift.snr_db``: the SQNR quantization tools report; ONNX Runtime's ``qdq_loss_debug`` gives the
  same figure). Errors accumulate: a layer after a collapsed one is low too.
- **Sensitivity**: the model with that layer *alone* quantized (every other candidate in ``float_nodes``),
  its outputs' SNR against the reference: the error the layer's own quantization adds. Layers are ranked by it,
  worst first.
- **Outlier channels**: per activation tensor a layer quantizes (its inputs and outputs that the graph's inputs
  reach), the largest magnitude of each channel (axis 1) on the reference: a channel more than
  ``OUTLIER_RATIO`` times the median channel's is named; ``others_share`` is the share of the tensor's range
  that the other channels use (per-tensor int8 spends its 256 steps on the whole range).

The **float fallback** (``rescue``) finds the shortest prefix of the ranking that, kept in float, makes the
target pass (prefixes doubling, then a bisection), then prunes the set back (a layer stays float only if the target fails without it), and reports the variant's
size and median latency before and after: what the rescue costs.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from portability.core.errors import UsageError
from portability.core.status import Status

#: a channel whose largest magnitude is more than this many times the median channel's is an outlier
OUTLIER_RATIO = 8.0


def quantizer(target) -> type | None:
    """The converter of ``target``'s chain that reduces precision and takes ``float_nodes``, or None."""
    from portability.core.target import load_class

    for path, _ in target.converters:
        cls = load_class(path)
        if getattr(cls, "keeps_float", False):
            return cls
    return None


@dataclasses.dataclass
class Bench:
    """Checks of one model on one target under ``float_nodes`` sets, through one session."""

    model: Path
    target: str
    base: Any
    session: Any
    conv: type
    say: Callable[[str], None] = lambda s: None
    checks: int = 0

    def run(self, float_nodes: list[str], path: Path | None = None, runs: int = 0):
        """The target's result and the kept outputs ``(result, reference outputs, target outputs)``."""
        from portability.engine.pipeline import check as run_check

        kept: dict = {}
        extra = {self.conv.name(): {"float_nodes": list(float_nodes)}} if float_nodes else {}
        options = {k: dict(v) for k, v in (self.base.converter_options or {}).items()}
        for k, v in extra.items():
            options[k] = {**options.get(k, {}), **v}
        o = dataclasses.replace(self.base, runs=runs, converter_options=options)
        report = run_check(path or self.model, o, session=self.session, kept=kept)
        self.checks += 1
        res = next(x for x in report.targets if x.id == self.target)
        outs = kept.get("outputs") or {}
        return res, outs.get(report.reference) or {}, outs.get(self.target) or {}

    def passes(self, float_nodes: list[str]) -> bool:
        return self.run(float_nodes)[0].status == Status.PASS


def output_snr(res) -> float | None:
    """The worst output's SNR (dB) of a target's result, None when nothing was compared."""
    vals = [o.get("snr_db") for o in ((res.metrics or {}).get("outputs") or {}).values()]
    vals = [float(v) for v in vals if v is not None]
    return min(vals) if vals else None


def outliers(value: Any, rank: int | None = None) -> dict | None:
    """An activation's channels (axis 1) whose largest magnitude stands out, and the share of the tensor's
    range the others use; None for a tensor with no channel axis. ``value``: the check's kept values (batches
    stacked on a leading axis when ``rank``, the tensor's own rank, is one less)."""
    try:
        arr = np.concatenate([np.asarray(x, dtype=np.float64) for x in value]) if isinstance(value, list) \
            else np.asarray(value, dtype=np.float64)
    except ValueError:  # batches of other shapes
        return None
    if rank is not None and arr.ndim == rank + 1:
        arr = arr.reshape((-1,) + arr.shape[2:])
    if arr.ndim < 2 or arr.shape[1] < 2 or not np.isfinite(arr).all():
        return None
    mags = np.abs(np.moveaxis(arr, 1, 0).reshape(arr.shape[1], -1)).max(axis=1)
    med = float(np.median(mags))
    out = [int(c) for c in np.nonzero(mags > OUTLIER_RATIO * max(med, 1e-12))[0]] if med > 0 else []
    rest = np.delete(mags, out)
    top = float(mags.max())
    return {"outlier_channels": out, "max_abs": top,
            "others_share": round(float(rest.max()) / top, 6) if out and top > 0 and rest.size else 1.0}


def _tensors(node, live: set[str], inits: set[str]) -> list[str]:
    """The activations a layer quantizes: its inputs and outputs that the graph's inputs reach."""
    return [x for x in list(node.input) + list(node.output) if x and x in live and x not in inits]


def _probe_tensors(g, names: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Every candidate's activations that can be a cut's output (float, of known type), and per node which."""
    by_name = {n.name: n for n in g.nodes}
    per: dict[str, list[str]] = {}
    for name in names:
        fused = _compared(g, by_name[name])
        per[name] = [t for t in _tensors(by_name[name], g.live, g.inits) + ([fused] if fused else [])
                     if t in g.types and g.types[t].tensor_type.elem_type in (1, 10, 11)]
    return list(dict.fromkeys(t for ts in per.values() for t in ts if t not in g.inputs)), per


#: activations a quantizer fuses into the op before them: the op's quantized output is read after them
FUSED = ("Relu", "Clip")


def _compared(g, node) -> str | None:
    """The tensor a layer's quantized output is compared on: its output, or, where its only reader is an
    activation the quantizers fuse into it (a Conv's Relu: ONNX Runtime's QDQ gives the Conv's output the
    Relu's range, TFLite fuses the two), that activation's output."""
    if not node.output:
        return None
    readers = g.consumers.get(node.output[0], [])
    if len(readers) == 1 and readers[0] < len(g.nodes) and g.nodes[readers[0]].op_type in FUSED:
        return g.nodes[readers[0]].output[0]
    return node.output[0]


def layers(bench: Bench, graph_path: Path, names: list[str], work: Path, into: list | None = None) -> list[dict]:
    """The candidates ``names`` with their SNR, sensitivity and outlier channels, ranked worst first (``into``:
    the list to fill, each layer as it is measured, ranked at the end: an interrupted report keeps them)."""
    from portability.explain.cuts import Graph
    from portability.metrics.drift import snr_db

    g = Graph(graph_path)
    probe, per = _probe_tensors(g, names)
    ref: dict = {}
    got: dict = {}
    if probe:
        bench.say(f"every quantized tensor on {bench.target} ({len(probe)} tensors)")
        _, ref, got = bench.run([], g.cut(probe, work / "tensors" / "model.onnx"))
    by_name = {n.name: n for n in g.nodes}
    out = [] if into is None else into
    for i, name in enumerate(names):
        node = by_name[name]
        bench.say(f"{name} alone quantized ({i + 1}/{len(names)})")
        res, _, _ = bench.run([n for n in names if n != name])
        own = _compared(g, node)
        snr = snr_db(_flat(ref[own]), _flat(ref[own]) - _flat(got[own])) if own in ref and own in got else None
        found = [(t, o) for t in per[name] if t in ref and (o := outliers(ref[t], _rank(g, t)))]
        channels = sorted({c for _, o in found for c in o["outlier_channels"]})
        share = min((o["others_share"] for _, o in found), default=None)
        out.append({"node": name, "op_type": node.op_type, "output": node.output[0] if node.output else None,
                    **({"compared": own} if own and node.output and own != node.output[0] else {}), "snr_db": _round(snr), "sensitivity_db": _round(output_snr(res)),
                    "sensitivity_status": str(res.status), "outlier_channels": channels,
                    **({"others_share": share} if channels else {}),
                    **({"outlier_tensors": [t for t, o in found if o["outlier_channels"]]} if channels else {})})
    key = lambda d: (d["sensitivity_db"] if d["sensitivity_db"] is not None else float("inf"),  # noqa: E731
                     d["snr_db"] if d["snr_db"] is not None else float("inf"))
    out.sort(key=key)
    return out


def _rank(g, tensor: str) -> int | None:
    t = g.types.get(tensor)
    return len(t.tensor_type.shape.dim) if t is not None and t.tensor_type.HasField("shape") else None


def _flat(v: Any) -> np.ndarray:
    return np.concatenate([np.ravel(x) for x in v]).astype(np.float64) if isinstance(v, list) else np.ravel(v).astype(np.float64)


def _round(v: float | None) -> float | None:
    return None if v is None or not np.isfinite(v) else round(float(v), 2)


def rescue(bench: Bench, ranked: list[str], tried: list | None = None) -> dict:
    """The smallest float fallback found: the shortest prefix of the ranking under which the target passes
    (prefixes of 1, 2, 4… layers, then a bisection between the last failing and the first passing one: about
    2·log2(N) checks), then pruned back (a layer stays float only if the target fails without it).
    ``{"float_nodes", "tried"}`` or ``{"float_nodes": None, "why", "tried"}`` (``tried``: the list to fill)."""
    tried = [] if tried is None else tried

    def passes(nodes: list[str], what: str) -> bool:
        bench.say(what)
        ok = bench.passes(nodes)
        tried.append({"float_nodes": list(nodes), "passes": ok})
        return ok

    lo, k = 0, 1  # the longest prefix known to fail (0: the variant as it is), the next to try
    while not passes(ranked[:k], f"the {k} worst layer{'s' * (k > 1)} in float"):
        if k >= len(ranked):
            return {"float_nodes": None, "tried": tried,
                    "why": f"the target fails even with all {len(ranked)} quantized layers in float: its quantization is not the cause"}
        lo, k = k, min(2 * k, len(ranked))
    while k - lo > 1:
        mid = (lo + k) // 2
        if passes(ranked[:mid], f"the {mid} worst layers in float"):
            k = mid
        else:
            lo = mid
    kept = ranked[:k]
    for name in list(reversed(kept))[1:]:  # the last one is needed: the prefix without it fails
        trial = [n for n in kept if n != name]
        if passes(trial, f"without {name} in float"):
            kept = trial
    return {"float_nodes": kept, "tried": tried}


def costs(bench: Bench, float_nodes: list[str], runs: int) -> dict:
    """The variant as it is and with the fallback: size, median latency, accuracy."""
    out: dict[str, dict] = {}
    for key, nodes in (("before", []), ("after", float_nodes)):
        res, _, _ = bench.run(nodes, runs=runs)
        m = res.metrics or {}
        out[key] = {"status": str(res.status), "size_bytes": (res.artifact or {}).get("size_bytes"),
                    "p50_ms": ((m.get("latency_ms") or {}).get("p50")), "accuracy": m.get("accuracy"),
                    "snr_db": _round(output_snr(res))}
    return out


def reproduce(model: Path, target: str, conv: type, float_nodes: list[str], dataset: str | None) -> dict:
    """The settings-file line and the Python call that make the rescued variant."""
    option = f"converter_options.{conv.name()}.float_nodes = {json.dumps(float_nodes)}"
    ds = f", dataset={str(dataset)!r}" if dataset else ""
    python = (f"portability.check({str(model)!r}, targets={target!r}{ds}, "
              f"converter_options={{{conv.name()!r}: {{'float_nodes': {float_nodes!r}}}}})")
    return {"option": option, "python": python}


def report_of(model_path: Path, target: str, opts, session, info, say: Callable[[str], None] = lambda s: None,
              search: bool = False, doc: dict | None = None) -> dict:
    """The quantization report of ``target`` (see the module doc); with ``search``, the float fallback too.
    ``session`` and ``info``: from ``explain.probe.opened``. ``doc``: the dict to fill as the figures come
    (what an interrupted report still holds)."""
    import onnx

    from portability.engine import plan

    started = time.monotonic()
    targets, no_route, _ = plan.for_check(info.format, target, opts.via)
    t = next((x for x in targets if x.id == target), None)
    if t is None:
        raise UsageError(f"no route to {target} from a {info.format} model" + (f": {no_route[target]}" if target in no_route else ""))
    conv = quantizer(t)
    if conv is None:
        raise UsageError(f"{target} does not reduce the model's precision: there is no quantization to report on")
    if info.format != "onnx":
        raise UsageError(f"the quantization report reads an ONNX model's layers; {Path(model_path).name} is {info.format}: "
                         "give its ONNX export (the check's own is in the cache: `portability check MODEL --via onnx`)")
    names = conv.quantizable_nodes(onnx.load(str(model_path), load_external_data=False).graph)
    if not names:
        raise UsageError(f"{conv.name()} reduces the precision of no node of this model")
    base = dataclasses.replace(opts, targets=target, runs=0, robustness=False, versions={}, localize=None, fix=False)
    bench = Bench(Path(model_path), target, base, session, conv, say)
    doc = {} if doc is None else doc
    try:
        return _filled(doc, bench, names, search, opts)
    finally:
        doc["checks"] = bench.checks
        doc["seconds"] = round(time.monotonic() - started, 1)


def _filled(doc: dict, bench: Bench, names: list[str], search: bool, opts) -> dict:
    import tempfile

    target, conv, model_path = bench.target, bench.conv, bench.model
    say = bench.say
    say(f"{target} as it is")
    res, _, _ = bench.run([])
    doc |= {"target": target, "status": str(res.status), "quantizer": conv.name(),
                           "quantization": ((res.details or {}).get("artifact_meta") or {}).get("quantization"),
                           **({"calibration": cal} if (cal := (res.details or {}).get("calibration")) else {}),
                           "snr_db": _round(output_snr(res)), "candidates": len(names), "layers": []}
    with tempfile.TemporaryDirectory(prefix="portability-quant-report-") as tmp:
        layers(bench, Path(model_path), names, Path(tmp), into=doc["layers"])
    if search and res.status != Status.PASS:
        doc["rescue"] = {"float_nodes": None, "tried": []}
        found = rescue(bench, [x["node"] for x in doc["layers"]], tried=doc["rescue"]["tried"])
        doc["rescue"] = found
        if found["float_nodes"] is not None:
            doc["rescue"].update(costs(bench, found["float_nodes"], opts.runs or 0))
            doc["rescue"].update(reproduce(Path(model_path), target, conv, found["float_nodes"], opts.dataset))
    return doc


def attach(report, model_path: Path, opts, say: Callable[[str], None] = lambda s: None) -> None:
    """``check --localize``: the quantization report of every quantized target that drifts, in its
    ``details.quantization`` (why not, where it cannot be made)."""
    from portability.engine import plan
    from portability.explain.probe import opened

    drifting = [t for t in report.targets if t.status == Status.DRIFT and t.id != report.reference]
    chosen = []
    for t in drifting:
        planned = next((x for x in plan.for_check("onnx", t.id, opts.via)[0] if x.id == t.id), None)
        if planned is not None and quantizer(planned) is not None:
            chosen.append(t)
    if not chosen:
        return
    with opened(model_path, opts) as (info, session):
        for t in chosen:
            say(f"quantization report of {t.id}")
            try:
                t.details["quantization"] = report_of(model_path, t.id, opts, session, info, say)
            except UsageError as e:
                t.details["quantization"] = {"target": t.id, "error": str(e)}


#: Model Explorer's colours for a layer's sensitivity (dB): red below 20, amber below 35, green above
_COLOURS = [{"value": 20.0, "bgColor": "#ffcdd2"}, {"value": 35.0, "bgColor": "#ffe0b2"}, {"value": 1e308, "bgColor": "#c8e6c9"}]


def node_data(doc: dict) -> dict:
    """The layers' sensitivity in Model Explorer's node-data format (keyed by output tensor names, which its
    ONNX adapter matches): the graph coloured by quantization error, red where a layer alone breaks the output."""
    results = {x["output"]: {"value": x["sensitivity_db"] if x["sensitivity_db"] is not None else 999.0}
               for x in doc.get("layers") or [] if x.get("output")}
    return {"results": results, "thresholds": _COLOURS}
