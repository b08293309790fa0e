"""``portability localize MODEL --target ID``: where on a target the model starts to compute something else.

The model's ONNX graph is cut at nodes (in its topological order) and each cut — the graph up to that node,
its outputs the tensors that cross the cut — is checked on the target as ``check`` checks a model (the same
converters, isolated workers, browsers and emulator; one session for them all), on the same inputs, against
the reference. A tensor *diverges* when the target's values differ from the reference's beyond the target's
own bounds, scaled to the tensor's magnitude: ``max_abs > max_abs_bound * max(1, max|reference|)`` or
``cosine < cosine_bound`` (or NaN/Inf on one side only).

- A target that runs the ONNX graph itself (ONNX Runtime on the server, in the browser, in ORT format) gets
  every node's output in a few runs (chunks of at most ``CHUNK_BYTES``, never every tensor at once): the
  whole drift curve, and the first node, in topological order, whose output diverges.
- A converted target (TFLite, TF.js, SavedModel) renames and fuses tensors: the cut is bisected over the
  topological order — O(log N) conversions — to the first node whose cut diverges, the cut before it clean.

The first diverging node's inputs' drift says whether the op itself is at fault (clean inputs, diverging
output). The **reproducer** is that node alone, fed with the reference's values of its inputs (its constant
inputs folded in as initializers), or, where the node alone does not reproduce, the graph cut at that node
with the model's inputs; ``reproduces`` says whether that file, checked by itself, diverges on the target.
A target whose output stops depending on the input (the same values for every input batch where the
reference's vary) is localized the same way, and ``first_constant`` names the first node where it happens.
A target that fails to convert, load or run is bisected on that failure: the first node whose cut fails.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np

from portability.core.errors import UsageError
from portability.core.status import COMPARED, ERRORS as _ERRORS, Status
from portability.core.target import load_class
from portability.explain.probe import Probe, tensor_drift
from portability.explain.cuts import Graph

#: the most bytes of intermediate tensors (reference and target together, all batches) one run returns
CHUNK_BYTES = 256 * 2**20
#: cuts that may fail on the target (each tried a node away from the last) before the bisection gives up
MAX_FAILED_CUTS = 3
#: formats a runtime runs the ONNX graph itself in: every tensor keeps its name
GRAPH_FORMATS = ("onnx", "ort")


class Localizer:
    """One model on one target (see the module doc). ``check`` runs a model file through the check
    pipeline with the localizer's options and returns ``(report, outputs)``; ``say`` reports progress."""

    def __init__(self, graph: Graph, target: str, check: Callable, work: Path, say: Callable[[str], None]):
        self.g, self.target, self._check, self.work, self.say = graph, target, check, work, say
        self.bounds: dict = {}
        self.conversions = 0
        self.reference_values: dict[str, Any] = {}

    def probe(self, index: int, tensors: list[str], name: str, runtime: dict | None = None) -> Probe:
        path = self.g.cut(tensors, self.work / name / "model.onnx")
        report, outputs, ref_id = self._check(path, runtime=runtime)
        self.conversions += 1
        t = next(x for x in report.targets if x.id == self.target)
        p = Probe(index, t.status, t.error)
        ref, got = outputs.get(ref_id) or {}, outputs.get(self.target) or {}
        for name_ in tensors:
            if name_ in ref:
                self.reference_values[name_] = ref[name_]
            if name_ in ref and name_ in got:
                p.tensors[name_] = tensor_drift(ref[name_], got[name_], self.bounds)
        shutil.rmtree(path.parent, ignore_errors=True)
        return p

    def curve_all(self, points: list[int], batches: int) -> list[Probe]:
        """Every cut point's outputs, in runs of at most CHUNK_BYTES."""
        probes, chunk, size = [], [], 0
        names = {i: self.g.floats(i) for i in points}
        per = {i: sum(_bytes(self.g.types[o], batches) for o in names[i]) for i in points}
        groups: list[list[int]] = []
        for i in points:
            if chunk and size + per[i] > CHUNK_BYTES:
                groups.append(chunk)
                chunk, size = [], 0
            chunk.append(i)
            size += per[i]
        groups += [chunk] if chunk else []
        for j, grp in enumerate(groups):
            self.say(f"run {j + 1}/{len(groups)}: {len(grp)} nodes' outputs")
            whole = self.probe(grp[-1], [o for i in grp for o in names[i]], f"chunk{j}")
            for i in grp:
                probes.append(Probe(i, whole.status, whole.error, {o: whole.tensors[o] for o in names[i] if o in whole.tensors}))
        return probes

    def bisect(self, points: list[int], mode: str) -> tuple[Probe | None, Probe | None, list[Probe]]:
        """The last clean cut and the first bad one (None before the first point: the model's inputs)."""
        lo, hi = -1, len(points) - 1  # the full graph (the last point's cut holds every output) is bad
        seen: dict[int, Probe] = {}
        failed: set[int] = set()
        rounds = max(1, int(np.ceil(np.log2(len(points) + 1))))
        while hi - lo > 1:
            # the middle cut, or the nearest one that has not failed: a cut that fails is no divergence, and
            # another cut a node away (a converter that merged two of its outputs, say) may convert
            left = [k for k in range(lo + 1, hi) if k not in failed]
            if not left:  # every cut between the last clean one and the first bad one failed
                return None, seen[min(failed)], [seen[k] for k in sorted(seen)]
            mid = min(left, key=lambda k: abs(k - (lo + hi) // 2))
            self.say(f"bisection step {len(seen) + 1} of about {rounds}: the cut after node {mid} "
                     f"({self.g.nodes[points[mid]].op_type} '{self.g.nodes[points[mid]].name}')")
            p = self.probe(points[mid], self.g.frontier(points[mid]), f"cut{points[mid]}")
            seen[mid] = p
            if mode != "error" and p.status in _ERRORS:
                failed.add(mid)
                if len(failed) > MAX_FAILED_CUTS:  # nothing to go on
                    return None, p, [seen[k] for k in sorted(seen)]
                continue
            bad = failing(p, mode)
            lo, hi = (lo, mid) if bad else (mid, hi)
        first = seen.get(hi) or self.probe(points[hi], self.g.frontier(points[hi]), f"cut{points[hi]}")
        seen[hi] = first
        before = seen.get(lo) if lo >= 0 else None
        if lo >= 0 and before is None:
            before = seen[lo] = self.probe(points[lo], self.g.frontier(points[lo]), f"cut{points[lo]}")
        return before, first, [seen[k] for k in sorted(seen)]


def _bytes(t, batches: int) -> int:
    dims = [d.dim_value if d.HasField("dim_value") else 64 for d in t.tensor_type.shape.dim] if t.tensor_type.HasField("shape") else [4096]
    return 2 * 8 * batches * int(np.prod(dims or [1]))  # both sides, as float64 in the comparison


def _entry(g: Graph, p: Probe, outputs: list[str] | None = None) -> dict:
    names = outputs if outputs is not None else list(p.tensors)
    vals = [p.tensors[o] for o in names if o in p.tensors]
    worst = max((v.get("max_abs", float("inf")) for v in vals), default=None)
    cos = min((v.get("cosine", 0.0) for v in vals), default=None)
    ratio = max((v["ratio"] for v in vals if v.get("ratio") is not None), default=None)
    d = {**g.describe(p.index), "max_abs": worst, "cosine": cos, "ratio": ratio, "diverges": p.bad}
    if p.status not in COMPARED:
        d.update(status=p.status, error=p.error)
    if p.constant:
        d["constant"] = True
    return d


def run(model_path: Path, target: str, opts, out_dir: Path, say: Callable[[str], None] = lambda s: None) -> dict:
    """Localize ``model_path`` on ``target`` (see the module doc); the reproducer files go to ``out_dir``.
    Returns the localize JSON document."""
    from portability.engine.pipeline import load_source_isolated
    from portability.core.inputs import prepare as prepare_feeds
    from portability.targets import registry

    reg = registry()
    if target not in reg:
        raise UsageError(f"unknown target '{target}' (see `portability targets`)")
    info = load_source_isolated(model_path, sandbox=opts.sandbox, shapes=opts.shapes)
    if info.format != "onnx":
        from portability.explain.export import onnx_export

        onnx_path, how = onnx_export(Path(model_path), info, reg[target], opts, say)
        doc = run(onnx_path, target, opts, out_dir, say)
        doc.update(model=str(model_path), source={"format": info.format, "localized_on": how, "onnx": str(onnx_path)})
        (out_dir / "localize.json").write_text(json.dumps(doc, indent=2, default=str))
        return doc
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / ".cuts"
    work.mkdir(exist_ok=True)
    feeds = prepare_feeds(info, opts)
    inputs = out_dir / "inputs.npz"
    np.savez(inputs, **feeds.arrays)
    base = dataclasses.replace(opts, inputs=inputs, dataset=None, targets=target, runs=0, robustness=False, versions={},
                               localize=None)
    g = Graph(Path(model_path))
    points = g.cut_points()
    if not points:
        raise UsageError(f"{Path(model_path).name}: no node has a float output to compare")
    try:
        doc = _localize(model_path, target, reg[target].runtime, base, out_dir, work, g, points, feeds.batches, say)
        (out_dir / "localize.json").write_text(json.dumps(doc, indent=2, default=str))
        return doc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _localize(model_path: Path, target: str, runtime: str, base, out_dir: Path, work: Path, g: Graph, points: list[int],
              batches: int, say: Callable[[str], None]) -> dict:
    from portability.engine.pipeline import check as run_check
    from portability.engine.session import Session

    with Session(mode=base.sandbox, reads=(str(out_dir.resolve()), str(Path(model_path).resolve().parent))) as session:
        def check(path: Path, given_inputs: Path | None = None, runtime: dict | None = None):
            kept: dict = {}
            o = dataclasses.replace(base, inputs=given_inputs or base.inputs,
                                    runtime_options={**base.runtime_options, **({target: runtime} if runtime else {})})
            report = run_check(path, o, session=session, kept=kept)
            return report, kept.get("outputs") or {}, report.reference

        loc = Localizer(g, target, check, work, say)
        say(f"the whole model on {target}")
        whole, outs, ref_id = check(Path(model_path))
        loc.conversions += 1
        t = next((x for x in whole.targets if x.id == target), None)
        bounds = loc.bounds = dict(t.thresholds or {}) if t else {}
        doc: dict[str, Any] = {"target": target, "status": t.status if t else Status.SKIPPED, "model": str(model_path),
                               "nodes": len(g.nodes), "bounds": {k: bounds.get(k) for k in ("max_abs", "cosine")},
                               "first_divergence": None, "curve": [], "reproducer": None, "conversions": 0}
        if t is None or t.status in (Status.PASS, Status.SKIPPED) or t.id == ref_id:
            doc["why"] = ("nothing diverges" if t and t.status == Status.PASS else
                          f"the target did not run: {t.error if t else 'not planned'}")
            doc["conversions"] = loc.conversions
            return doc
        doc.update(_placement(t.details or {}))
        ref, got = outs.get(ref_id) or {}, outs.get(target) or {}
        flat = any(tensor_drift(ref[k], got[k], bounds).get("constant") for k in ref if k in got)
        mode = "error" if t.status in _ERRORS else "constant" if flat else Status.DRIFT.value
        doc["mode"] = mode
        graph_format = (t.artifact or {}).get("format") in GRAPH_FORMATS
        curve = loc.curve_all(points, batches) if graph_format and mode != "error" else []
        if curve and not any(p.status in _ERRORS for p in curve):
            first = next((p for p in curve if failing(p, mode)), None)
            doc["method"] = "every node's outputs"
        else:  # a converted target, a failure, or a graph that fails with its tensors as outputs
            before, first, curve = loc.bisect(points, mode)
            doc["method"] = "bisection over the topological order" + {"error": f" (on the {t.status})",
                                                                       "constant": " (on the output that ignores the input)"}.get(mode, "")
        doc["curve"] = [_entry(g, p) for p in curve]
        doc["node_data"] = str(node_data(curve, out_dir / "node_data.json"))
        const = next((p for p in curve if p.constant), None)
        if const is not None:
            doc["first_constant"] = g.describe(const.index)
        if first is not None and mode != "error" and first.status in _ERRORS:
            node = g.nodes[first.index]
            doc["why"] = (f"the cut after node {first.index} ({node.op_type} '{node.name}') fails on {target} itself "
                          f"({first.status}: {' '.join((first.error or '').split())[:240]}): a cut that fails is no "
                          "divergence, so the bisection cannot tell where the outputs diverge")
            doc["conversions"] = loc.conversions
            return doc
        if first is None or not failing(first, mode):
            doc["why"] = "no node's output diverges by itself (the model's outputs do: see the curve)"
            doc["conversions"] = loc.conversions
            return doc
        doc["first_divergence"] = _first(g, first, curve, doc.get("placement"))
        if mode == "error":
            doc["first_divergence"]["error"] = first.error
        doc["reproducer"] = _reproducer(loc, g, first.index, out_dir, check, mode, say)
        if (swap := load_class(runtime).reference_kernels) and mode != "error":
            doc["kernels_ab"] = _kernels_ab(loc, g, first, mode, say, swap)
        doc["conversions"] = loc.conversions
    return doc


def _placement(details: dict) -> dict:
    """ONNX Runtime Web's node placement (more than one provider: a partial fallback, with which nodes ran where)."""
    placed = details.get("node_placement")
    if not placed:
        return {}
    nodes = details.get("node_placement_nodes")
    return {"placement": {"providers": placed, "partial_fallback": len(placed) > 1, **({"nodes": nodes} if nodes else {})}}


def _first(g: Graph, first: Probe, curve: list[Probe], placement: dict | None) -> dict:
    """The first diverging node: what it is, its outputs' and inputs' drift, whether the op is at fault, and
    where it ran (a partial fallback's provider)."""
    node = g.nodes[first.index]
    in_drift = {}
    for x in (x for x in node.input if x):
        hit = next((p.tensors[x] for p in curve if x in p.tensors), None)
        in_drift[x] = 0.0 if x in g.inputs or x in g.inits or x not in g.producer else (hit or {}).get("max_abs")
    out = {**g.describe(first.index), **_entry(g, first, g.floats(first.index)), "inputs_max_abs": in_drift,
           "op_at_fault": not any(_diverging(x, curve) for x in in_drift)}
    out.pop("outputs", None)
    ran = [ep for ep, names in ((placement or {}).get("nodes") or {}).items() if node.name in names]
    if ran:
        out["provider"] = ran[0]
    return out


def _kernels_ab(loc: Localizer, g: Graph, first: Probe, mode: str, say: Callable[[str], None], swap: dict) -> dict:
    """The runtime's default kernels (LiteRT's XNNPACK) against its reference kernels (the runtime options
    ``swap``: ``Runtime.reference_kernels``) on the cut at the first diverging node: which of the two computes
    that node differently."""
    say("the first diverging node's cut on the runtime's reference kernels")
    ref = loc.probe(first.index, list(first.tensors), f"ref{first.index}", runtime=dict(swap))
    own = g.floats(first.index)
    worst = lambda p: max((p.tensors[o].get("max_abs") or 0.0 for o in own if o in p.tensors), default=None)  # noqa: E731
    bad_ref = failing(Probe(ref.index, ref.status, ref.error, {o: ref.tensors[o] for o in own if o in ref.tensors}), mode)
    verdict = ("both kernel sets compute it differently: the converted model itself" if bad_ref else
               "only the default kernels (XNNPACK) compute it differently: LiteRT's reference kernels agree with the "
               "reference runtime (a delegate's kernel at fault)")
    return {"default": {"kernels": "xnnpack", "max_abs": worst(first)},
            "reference_kernels": {"kernels": "reference", "status": ref.status, "max_abs": worst(ref), "diverges": bad_ref},
            "verdict": verdict}


def node_data(curve: list[Probe], path: Path) -> Path:
    """The drift of each compared tensor in Model Explorer's node-data format (a graph's ``results`` keyed
    by output tensor names, which its ONNX adapter matches): the drift over the target's bound, so that
    above 1 diverges; green below, red above."""
    results = {name: {"value": round(float(t["ratio"]), 6) if t.get("ratio") is not None and np.isfinite(t["ratio"]) else 1e9}
               for p in curve for name, t in p.tensors.items()}
    data = {"results": results, "thresholds": [{"value": 1.0, "bgColor": "#c8e6c9"}, {"value": 1e308, "bgColor": "#ffcdd2"}]}
    path.write_text(json.dumps(data, indent=1))
    return path


def attach(report, model_path: Path, opts, say: Callable[[str], None] = lambda s: None) -> None:
    """``check --localize DIR``: localize every drifting target of ``report`` and put the result in its
    ``details.localize`` (a model that cannot be localized says why there); a quantized one also gets its
    quantization report in ``details.quantization`` (``explain.rescue``)."""
    for t in report.targets:
        if t.status != Status.DRIFT or t.id == report.reference:
            continue
        say(f"localizing {t.id}")
        try:
            doc = run(Path(model_path), t.id, dataclasses.replace(opts, localize=None),
                      Path(opts.localize) / t.id.replace("/", "_"), say)
        except UsageError as e:
            doc = {"target": t.id, "status": t.status, "error": str(e)}
        t.details["localize"] = doc
    from portability.explain import rescue

    rescue.attach(report, model_path, opts, say)


def _diverging(name: str, curve: list[Probe]) -> bool:
    return any(p.tensors.get(name, {}).get("diverges") or p.tensors.get(name, {}).get("constant") for p in curve)


def failing(p: Probe, mode: str) -> bool:
    """Whether a cut shows what is localized: the target's failure, an output that no longer follows the
    input, or a diverging one."""
    return p.status in _ERRORS if mode == "error" else p.constant if mode == "constant" else p.bad


def _reproducer(loc: Localizer, g: Graph, i: int, out_dir: Path, check, mode: str, say) -> dict:
    """The node alone with the reference's inputs; else the cut at the node with the model's inputs."""
    node = g.nodes[i]
    needed = [x for x in node.input if x and x not in g.inits]
    # a tensor of unknown rank cannot be a cut's output: without its values the node alone cannot be fed,
    # and the reproducer is the graph cut at the node
    missing = [x for x in needed if x not in loc.reference_values and x not in g.inputs and g.ranked(x)]
    values = dict(loc.reference_values)
    if missing:  # the reference's values of the node's inputs that no probe returned (integer tensors)
        say("the reference's values of the node's inputs")
        _, outs, ref_id = check(g.cut(missing, loc.work / "inputs" / "model.onnx"))
        values.update({k: v for k, v in (outs.get(ref_id) or {}).items() if k in missing})
    with np.load(out_dir / "inputs.npz", allow_pickle=False) as z:
        values.update({k: z[k] for k in z.files})
    tried = []
    for kind in ("node", "subgraph"):
        path = out_dir / f"reproducer_{kind}.onnx"
        if kind == "node":
            try:
                _, feeds = g.node_alone(i, values, path)
            except KeyError:
                continue
            feeds_path = out_dir / f"reproducer_{kind}_inputs.npz"
            np.savez(feeds_path, **feeds)
        else:
            g.cut(g.floats(i), path)
            feeds_path = out_dir / "inputs.npz"
        say(f"checking the reproducer ({kind}) by itself")
        report, outs, ref_id = check(path, feeds_path)
        loc.conversions += 1
        t = next(x for x in report.targets if x.id == loc.target)
        ref, got = outs.get(ref_id) or {}, outs.get(loc.target) or {}
        drift = {o_: tensor_drift(ref[o_], got[o_], loc.bounds) for o_ in g.floats(i) if o_ in ref and o_ in got}
        reproduces = failing(Probe(i, t.status, t.error, drift), mode)
        entry = {"kind": kind, "model": str(path), "inputs": str(feeds_path), "reproduces": reproduces, "status": t.status,
                 "max_abs": max((d.get("max_abs", 0.0) for d in drift.values()), default=None)}
        tried.append(entry)
        if reproduces:
            return {**entry, "tried": tried}
        path.unlink(missing_ok=True)
        if kind == "node":
            feeds_path.unlink(missing_ok=True)
    return {**tried[-1], "reproduces": False, "tried": tried}
