"""Remediation search: ``check --fix`` and ``portability fix MODEL --target ID``.

A target that fails to convert, load or run, or that drifts, is checked again under each of a bounded,
documented list of alternatives that apply to its route, one at a time, through the same cache, isolated
workers and shared services (one session for them all); the first under which it *passes* is reported with
the setting that makes it so. An alternative under which it converts but drifts is reported as drifting,
never as a fix.

The alternatives, in this order: those a converter or runtime declares (its ``fixes``, collected here), then
the two that are the converter graph's and the target registry's:

- **onnx2tf** (``SavedModelFromOnnx.fixes``: every TensorFlow, TFLite and TF.js target of an ONNX route), in this order:
  ``-rtpo OPS`` replaces the ops of the model that onnx2tf can build from TFLite built-ins (Erf, GeLU,
  HardSwish, Asin…: a Flex op or a missing kernel otherwise); ``-nuo`` skips onnxsim's simplification;
  ``-dgc`` splits grouped convolutions (a model with one); ``-ebu`` unfolds batched MatMuls (a model with
  MatMul); ``-kat INPUTS`` keeps the inputs' shapes as given (no channel-last transpose); ``-ofgd`` the GPU
  delegate's op choices; and, for a drift only, ``-agj``: onnx2tf's own search for parameter replacements
  that restore accuracy (slow).
- **ONNX Runtime** (``OrtCpu.fixes``, on the server and in the browser): graph optimizations ``basic``, then ``disabled`` (an
  optimizer pass at fault).
- **Another route** of the converter graph: for a source that is not ONNX and a route that avoids ONNX, the
  route through ONNX (``via = "onnx"``).
- **Another backend of the same engine** (last: it is another target, and said so): the other targets of the
  same runtime and variant (``web/ort-wasm`` for a drifting ``web/ort-webgpu``).

A passing alternative is reported as the settings-file table that selects it (``converter_options`` /
``runtime_options``, also keyword arguments of ``portability.check``) and, for onnx2tf, the command line
that converts with it.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from portability.core.errors import UsageError
from portability.core.status import FAILING, Status
from portability.explain.probe import opened  # noqa: F401  (the commands open their session through fix)


@dataclass(frozen=True)
class Alternative:
    name: str
    #: the settings that select it (merged over the check's own)
    settings: dict
    #: how a user selects it: a line of a settings file (portability.toml, or [tool.portability] in pyproject.toml)
    option: str
    #: the raw converter's command line, where there is one
    command: str | None = None
    #: only worth trying on a drift (not on a failure to convert or run)
    drift_only: bool = False


def _declared(fix: dict[str, Any], ops: set[str], inputs: list[str]) -> tuple[str, dict[str, Any]] | None:
    """(name, options) of a converter's or runtime's declared alternative for this model, None when it does
    not apply (none of its ops in the model, or no input names for an ``"{inputs}"`` argument)."""
    among = [o for o in fix.get("ops", ()) if not ops or o in ops]
    if fix.get("ops") and not among:
        return None
    stands = {"{ops}": among, "{inputs}": list(inputs)}
    options: dict[str, Any] = {}
    for key, value in fix["options"].items():
        if isinstance(value, list):
            if any(v in stands and not stands[v] for v in value):
                return None
            value = [x for v in value for x in (stands[v] if v in stands else [v])]
        options[key] = value
    return fix["name"].replace("{ops}", " ".join(among)), options


def _lines(prefix: str, options: dict[str, Any]) -> str:
    """The settings-file lines that set ``options`` under ``prefix``."""
    return "; ".join(f"{prefix}.{k} = {json.dumps(v)}" for k, v in options.items())


def alternatives(steps: list[str], runtime: str, ops: set[str], inputs: list[str], target: str,
                 source: str = "onnx", siblings: tuple[str, ...] = ()) -> list[Alternative]:
    """The alternatives that apply to a target whose chain has converters ``steps`` (class names) and whose
    runtime is ``runtime`` (``module:Class``), for a model with op types ``ops`` (empty: unknown) of format
    ``source``; ``siblings``: the other targets of the same runtime and variant (its engine's other backends)."""
    from portability.converters.registry import CONVERTERS
    from portability.core.target import load_class

    out: list[Alternative] = []
    if source != "onnx" and "onnx" not in " ".join(steps).lower():
        out.append(Alternative("the route through ONNX (--via onnx)", {"via": "onnx"}, 'via = "onnx"'))
    paths = {p.rsplit(":", 1)[-1]: p for p in CONVERTERS}
    for conv in (load_class(paths[s]) for s in dict.fromkeys(steps) if s in paths):
        for fix in conv.fixes:
            found = _declared(fix, ops, inputs)
            if found:
                name, options = found
                command = conv.fix_command.format(args=" ".join(options.get("args", []))) if conv.fix_command else None
                out.append(Alternative(name, {"converter_options": {conv.name(): options}},
                                       _lines(f"converter_options.{conv.name()}", options), command,
                                       bool(fix.get("drift_only"))))
    run = load_class(runtime)
    for fix in run.fixes:
        found = _declared(fix, ops, inputs)
        if found and set(found[1]) <= run.OPTIONS:
            out.append(Alternative(found[0], {"runtime_options": {target: found[1]}},
                                   _lines(f'runtime_options."{target}"', found[1]), None, bool(fix.get("drift_only"))))
    for other in siblings:  # another backend of the same engine: a different target, said as such
        out.append(Alternative(f"another backend of the same engine: {other}", {"target": other}, f'targets = "{other}"'))
    return out


def _siblings(t, reference: str) -> tuple[str, ...]:
    """The other targets of ``t``'s runtime and variant (not the reference): its engine's other backends."""
    from portability.targets import registry

    return tuple(i for i, x in registry().items() if i not in (t.id, reference) and x.runtime == t.runtime
                 and x.variant == t.variant and x.gating)


def _merge(base: dict, extra: dict) -> dict:
    out = {k: dict(v) for k, v in (base or {}).items()}
    for k, v in extra.items():
        out[k] = {**out.get(k, {}), **v}
    return out


def _model_ops(path: Path, fmt: str) -> tuple[set[str], list[str]]:
    if fmt != "onnx":
        return set(), []
    import onnx

    g = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in g.initializer}
    return {n.op_type for n in g.node}, [i.name for i in g.input if i.name not in inits]


def search(model_path: Path, target: str, opts, session, info, say: Callable[[str], None] = lambda s: None,
           status: Status | None = None) -> dict:
    """Try the alternatives for ``target`` until one passes: ``{"target", "status", "tried": [{"alternative",
    "status", "error"}], "passing": {"alternative", "option", "command"} | None}``. ``session`` and ``info``:
    from :func:`opened`. ``status``: the target's status in the check already run (else a check finds it)."""
    from portability.engine import plan
    from portability.engine.pipeline import check as run_check
    from portability.explain import rescue

    targets, no_route, _ = plan.for_check(info.format, target, opts.via)
    t = next((x for x in targets if x.id == target), None)
    if t is None or target in no_route:
        raise UsageError(f"no route to {target} from a {info.format} model" + (f": {no_route[target]}" if target in no_route else ""))
    ops, inputs = _model_ops(Path(model_path), info.format)
    base = dataclasses.replace(opts, targets=target, runs=0, robustness=False, versions={}, localize=None, fix=False)

    def status_under(extra: dict) -> tuple[Status, str | None]:
        tid = extra.get("target", target)
        o = dataclasses.replace(base, targets=tid, via=extra.get("via", base.via),
                                converter_options=_merge(base.converter_options, extra.get("converter_options", {})),
                                runtime_options=_merge(base.runtime_options, extra.get("runtime_options", {})))
        r = run_check(Path(model_path), o, model=info, session=session)
        res = next(x for x in r.targets if x.id == tid)
        return res.status, res.error

    if status is None:
        say(f"{target} as it is")
        status, _ = status_under({})
    doc: dict[str, Any] = {"target": target, "status": status, "tried": [], "passing": None}
    if status not in FAILING:
        doc["why"] = f"nothing to fix: the target's status is {status}"
        return doc
    steps = [p.rsplit(":", 1)[-1] for p, _ in t.converters]
    alts = alternatives(steps, t.runtime, ops, inputs, target, info.format, _siblings(t, targets[0].id))

    def first_passing(among: list[Alternative]) -> bool:
        for alt in among:
            if alt.drift_only and status != Status.DRIFT:
                continue
            say(f"{target} with {alt.name}")
            st, err = status_under(alt.settings)
            doc["tried"].append({"alternative": alt.name, "status": st, **({"error": err} if err else {})})
            if st == Status.PASS:
                doc["passing"] = {"alternative": alt.name, "option": alt.option,
                                  **({"command": alt.command} if alt.command else {})}
                return True
        return False

    # a quantized variant that drifts: its quantizer's settings, then its layers kept in float, before the
    # other converters' and runtimes' alternatives (its float twin converts and runs as they are); last,
    # another backend of its engine
    q = rescue.quantizer(t) if status == Status.DRIFT else None
    mine = [a for a in alts if q is not None and q.name() in a.settings.get("converter_options", {})]
    own = [a for a in alts if "target" not in a.settings and a not in mine]
    if not first_passing(mine):
        if not (q is not None and _rescued(doc, model_path, target, opts, session, info, say, t)):
            if not first_passing(own):
                first_passing([a for a in alts if "target" in a.settings])
    if not doc["tried"]:
        doc["why"] = "no alternative applies to this target's route"
    return doc


def _rescued(doc: dict, model_path: Path, target: str, opts, session, info, say, t) -> bool:
    """For a quantized target that drifts: the smallest set of layers kept in float under which it passes
    (``explain.rescue``), as ``doc["passing"]`` with what it costs; the layers' ranking in
    ``doc["quantization"]``. True when one passes."""
    from portability.explain import rescue

    if info.format != "onnx":
        return False
    try:
        q = rescue.report_of(Path(model_path), target, opts, session, info, say, search=True)
    except UsageError as e:
        doc["tried"].append({"alternative": "layers kept in float", "status": Status.SKIPPED, "error": str(e)})
        return False
    found = q.pop("rescue", None) or {}
    doc["quantization"] = q
    nodes = found.get("float_nodes")
    doc["tried"].append({"alternative": f"layers kept in float ({len(found.get('tried') or [])} sets tried)",
                         "status": Status.PASS if nodes else Status.DRIFT, **({"error": found["why"]} if found.get("why") else {})})
    if not nodes:
        return False
    before, after = found.get("before") or {}, found.get("after") or {}
    doc["passing"] = {"alternative": f"{len(nodes)} of {q['candidates']} quantized layers kept in float: {', '.join(nodes)}",
                      "option": found["option"], "python": found["python"], "float_nodes": nodes,
                      **{k: {"before": before.get(k), "after": after.get(k)} for k in ("size_bytes", "p50_ms", "accuracy")}}
    return True


def attach(report, model_path: Path, opts, say: Callable[[str], None] = lambda s: None) -> None:
    """``check --fix``: search for each failing target of ``report``; the result is its ``details.fix``."""
    failing = [t for t in report.targets if t.status in FAILING and t.id != report.reference]
    if not failing:
        return
    with opened(model_path, opts) as (info, session):
        for t in failing:
            try:
                t.details["fix"] = search(Path(model_path), t.id, opts, session, info, say, status=t.status)
            except UsageError as e:
                t.details["fix"] = {"target": t.id, "status": t.status, "tried": [], "passing": None, "why": str(e)}
