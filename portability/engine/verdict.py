"""The one place a target's status and gating are decided.

Gating: a target's own default (``Target.gating``), then the ``--gate`` rules in order (``ID``/``+ID``
gating, ``-ID`` a cross-check; an id, a platform or ``all``), then the device rule: a GPU backend that
ran on a software adapter (SwiftShader) is a cross-check unless a rule named it gating explicitly.

Status: not run (``skipped``: unavailable here, or nothing to compare with), the worker's own failure
(``convert-error`` … ``crashed``), ``fallback`` when the backend that ran is not the one asked for (with
``--strict-backend``, also when some of the model's nodes ran off it: ``details["placement"]``), else
``drift`` when a metric is outside its threshold, else ``pass``.

The run: every gating target that did not fail, and (:func:`require_named`) every target named by its exact id in
``--targets`` having run: explicit means required. A platform name (``web``, ``all``) asks for what can run here,
so its skipped targets never fail the run; ``--allow-skipped`` lets named ones be skipped too.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from portability.core.protocol import WorkerResult
from portability.core.status import Status
from portability.core.target import Target
from portability.metrics import drift, empty, thresholds
from portability.report.schema import TargetResult
from portability.runtimes.base import off_backend


def backend_breach(asked: str | None, used: str | None, why: str | None = None) -> str | None:
    """The breach of a ``fallback``: the backend that ran is not the one asked for (``why``: the runtime's own
    words); None when it is, or when either is not known."""
    if not (asked and used and asked != used):
        return None
    return f"asked for {asked}, ran on {used}" + (f": {why}" if why else "")


def reported_breach(accepts: dict, info: dict) -> str | None:
    """The same rule over a device's own account of its run (a bundle page's ``info``): ``accepts``, what the
    runtime says that account holds when the backend asked for ran (``WebRuntime.accepts``); the bundle's
    page applies it too (``bundle/page/bundle.mjs``)."""
    for field, asked in accepts.items():
        used = info.get(field)
        breach = backend_breach(str(asked), used if isinstance(used, str) else None)
        if breach:
            return breach
    return None


def _named(rule: str, target: Target) -> bool:
    return rule.lstrip("+-") in (target.id, target.platform, "all")


@dataclass(frozen=True)
class Verdict:
    status: Status
    gating: bool
    breaches: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def gating(target: Target, rules: list[str], device: str | None = None) -> tuple[bool, list[str]]:
    """Whether ``target`` fails the run when it fails, and the note that explains a demotion."""
    g = target.gating
    for rule in rules:
        if _named(rule, target):
            g = not rule.startswith("-")
    explicit = any(not r.startswith("-") and _named(r, target) for r in rules)
    if device == "software" and g and not explicit:
        return False, ["ran on a software GPU adapter (SwiftShader), not a GPU: reported as a cross-check "
                       f"(--gate {target.id} makes it gating)"]
    return g, []


def skipped(target: Target, rules: list[str], reason: str, hint: str | None, bounds: dict) -> TargetResult:
    """The result of a target that did not run: ``reason`` and ``hint`` say why, and what would run it."""
    return TargetResult(id=target.id, platform=target.platform, status=Status.SKIPPED, gating=gating(target, rules)[0],
                        error=reason, hint=hint, metrics=empty(), thresholds=bounds)


def result(target: Target, rules: list[str], ev, strict: bool = False) -> TargetResult:
    """The result of a target that was given to a worker: what evaluation found of its run
    (``engine.evaluate.Evaluated``), with its status, gating and breaches decided (:func:`decide`)."""
    wr = ev.worker
    v = decide(target, rules, wr, ev.found, strict=strict)
    return TargetResult(id=target.id, platform=target.platform, status=v.status, gating=v.gating,
                        runtime=wr.runtime, device=wr.device, error=wr.error, hint=ev.hint, op=wr.op, node=wr.node,
                        artifact=wr.artifact, metrics=ev.metrics, thresholds=ev.thresholds, breaches=v.breaches,
                        notes=v.notes + ev.notes, details=ev.details)


def decide(target: Target, rules: list[str], worker: WorkerResult, found: list[str] | None = None,
           strict: bool = False) -> Verdict:
    """The status of a target that was given to a worker; ``found``: the reasons its metrics breach
    (None when nothing was compared: the worker failed, or this is the reference); ``strict``:
    ``--strict-backend``."""
    g, notes = gating(target, rules, worker.device)
    if not worker.ok:
        return Verdict(worker.status, g, (), tuple(notes))
    found = list(found or [])
    asked, used = worker.backend_requested, worker.backend_used
    why = worker.details.get("fallback_reason")  # the runtime's own words, where it gave them
    off = backend_breach(asked, used, why) or (off_backend(worker.details) if strict else None)
    if off:
        return Verdict(Status.FALLBACK, g, (off, *found), tuple(notes))
    status = Status.DRIFT if found else Status.PASS
    if status == Status.DRIFT and not g:
        notes.append(f"{target.id} is a cross-check: its disagreement is reported, it does not fail the run")
    if status == Status.DRIFT and worker.caveat:
        notes.append(worker.caveat)
    return Verdict(status, g, tuple(found), tuple(notes))


def named(spec: str) -> list[str]:
    """The exact target ids a ``--targets`` value names, in order (platform names and ``all`` name none)."""
    return list(dict.fromkeys(p.strip() for p in spec.split(",") if "/" in p))


def _convert_only(target_id: str) -> bool:
    """Whether the target's runtime never runs a model here by design (Core ML): its ``skipped`` after a
    conversion is all it can do (the runtime class says so: ``convert_only``)."""
    from portability.core.target import load_class
    from portability.targets import registry

    t = registry().get(target_id)
    try:
        return t is not None and bool(getattr(load_class(t.runtime), "convert_only", False))
    except (ImportError, AttributeError):
        return False


def unmet(report, spec: str) -> list:
    """The results of the targets ``spec`` names exactly that ended ``skipped`` (a convert-only target whose
    conversion was made excepted)."""
    asked = set(named(spec))
    return [t for t in report.targets if t.id in asked and t.status == Status.SKIPPED
            and not (t.artifact and _convert_only(t.id))]


def require_named(report, spec: str, allow_skipped: bool = False):
    """``report`` failed (``passed`` false, a note naming them) when a target ``spec`` names exactly was skipped,
    unless ``allow_skipped``; else ``report`` itself."""
    missing = [] if allow_skipped else unmet(report, spec)
    if not missing:
        return report
    ids = ", ".join(t.id for t in missing)
    note = (f"named with --targets but not run here: {ids}; a target named by its id is required "
            "(--allow-skipped lets the run pass without it)")
    return replace(report, passed=False, notes=(*report.notes, note))


def delegate_ab(results: list, targets: list[Target]) -> list[str]:
    """The report's note for a delegate A/B that disagrees: targets of one runtime and one program that differ
    only in their kernels — ExecuTorch's ``delegate`` variant (XNNPACK against its portable kernels), LiteRT's
    ``kernels`` option (its XNNPACK delegate against its built-in kernels) — where one drifts and the other
    passes: the drifting side's kernels are at fault, not the conversion they share."""
    status = {r.id: r.status for r in results}
    groups: dict[tuple, list[tuple[Target, str]]] = {}
    for t in targets:
        side = t.variant.get("delegate") or (t.options or {}).get("kernels")
        if side and t.id in status:
            rest = tuple(sorted((k, v) for k, v in t.variant.items() if k != "delegate"))
            groups.setdefault((t.runtime, rest), []).append((t, side))
    notes = []
    for group in groups.values():
        bad = [(t, s) for t, s in group if status[t.id] == Status.DRIFT]
        good = [(t, s) for t, s in group if status[t.id] == Status.PASS]
        for b, bs in bad:
            for g, gs in good:
                if bs != gs:
                    notes.append(f"delegate A/B: {b.id} ({bs}) drifts where {g.id} ({gs}) passes on the same "
                                 f"program: {bs}'s kernels are at fault, not the conversion")
    return notes


def check_notes(results: list[TargetResult], targets: list[Target], outputs: dict, reference: str) -> list[str]:
    """What the results say of the model as a whole: the reference as the odd one out, a delegate A/B."""
    return odd_one_out(results, targets, outputs, reference) + delegate_ab(results, targets)


def odd_one_out(results: list[TargetResult], targets: list[Target], outputs: dict, reference: str) -> list[str]:
    """Independent runtimes that agree with each other but not with the reference name it.

    Witnesses must be independent: targets that run one converted model (the same first conversion
    after the snapshot, e.g. one onnx2tf SavedModel) count once, and a runtime with a known caveat
    (onnx.reference's wrong kernels) is no witness. ``outputs``: target id -> output name -> array."""
    lineage = {t.id: (t.converters[1][0] if len(t.converters) > 1 else t.id) for t in targets}
    drifted = [r for r in results if r.status == Status.DRIFT and r.id in outputs and r.id != reference
               and not r.details.get("caveat")]
    agreeing: list[str] = []
    for i, a in enumerate(drifted):
        for b in drifted[i + 1:]:
            if drift.judge(thresholds.DEFAULTS, outputs[a.id], outputs[b.id]).agrees:
                agreeing += [x for x in (a.id, b.id) if x not in agreeing]
    if len({lineage.get(x, x) for x in agreeing}) >= 2:
        return [f"{', '.join(agreeing)} agree with each other but not with the reference {reference}: "
                "the reference may be the odd one out"]
    return []
