"""The check's plan: its targets, each with its converter chain (``converters/routes.py`` finds the routes),
the gates, the version matrix's targets, and which targets cannot run here (``targets.availability``)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from portability.converters.routes import (AS_GIVEN, Edge, NoRoute, Plan, check_via, edges, formats,  # noqa: F401
                                           plan, runtime_format, runtime_formats)
from portability.core.errors import UsageError
from portability.core.target import Target


def with_options(targets: list[Target], converter_options: dict, runtime_options: dict) -> list[Target]:
    """Each planned step with the options ``converter_options`` gives its converter (by class name), and each
    target's runtime with those ``runtime_options`` gives it (by target id)."""
    if not converter_options and not runtime_options:
        return targets
    return [replace(t, converters=tuple((p, {**o, **(converter_options.get(p.rsplit(":", 1)[-1]) or {})}) for p, o in t.converters),
                    options={**t.options, **(runtime_options.get(t.id) or {})}) for t in targets]


def for_generation(targets: list[Target]) -> list[Target]:
    """Each step with the options its converter declares for a model that generates (``--generate``:
    ``Converter.generation_options``, e.g. dynamic shapes kept so that the cache can grow); the user's own
    options for a step win."""
    from portability.core.target import load_class

    def opts(path: str, given: dict) -> dict:
        return {**getattr(load_class(path), "generation_options", {}), **given}

    return [replace(t, converters=tuple((p, opts(p, o)) for p, o in t.converters)) for t in targets]


def plan_targets(source_format: str, targets: list[Target], via: str | None = None
                 ) -> tuple[list[Target], dict[str, str], dict[str, dict]]:
    """Every target with its planned chain (the first, the reference, runs the source as given), the
    reason for each that has no route, and each plan's record for the report."""
    check_via(via)
    planned, no_route, records = [], {}, {}
    for i, t in enumerate(targets):
        try:
            p = plan(source_format, t, None if i == 0 else via)
        except NoRoute as e:
            no_route[t.id] = str(e)
            planned.append(t)
            continue
        planned.append(replace(t, converters=p.steps))
        records[t.id] = p.to_dict()
    return planned, no_route, records


__all__ = ["Plan", "NoRoute", "plan", "plan_targets", "with_options", "edges", "formats", "check_via", "runtime_format", "runtime_formats", "AS_GIVEN"]


def _source_only(fmt: str) -> bool:
    """A format only a source can be in (no converter makes it: ``keras``, ``torch``), or one that only such a
    format converts to (ExecuTorch's ``pte``, from ``torch`` alone): its targets belong to those sources."""
    made = [e for e in edges() if e.dst == fmt and not e.snapshot]
    return all(e.src != fmt and not any(x.dst == e.src and not x.snapshot for x in edges()) for e in made)


def for_check(source_format: str, spec: str, via: str | None = None, reg: dict | None = None,
              overrides: tuple[dict, dict] = ({}, {})) -> tuple[list[Target], dict[str, str], dict[str, dict]]:
    """The check's targets for a source: expanded from ``spec`` with the source's reference first, each
    planned. A target that runs only sources of another format (``server/keras`` for an ONNX source) is
    left out unless named; any other target without a route stays, to be reported ``skipped`` with why.
    Plans are recorded for the report when the source is not ONNX or ``via`` is given. ``overrides``: the
    converter and runtime options to add (``with_options``)."""
    from portability.sources import reference
    from portability.targets import expand, registry

    named = {p.strip() for p in spec.split(",") if "/" in p}
    targets = expand(spec, reg or registry(), reference=reference(source_format))
    planned, no_route, records = plan_targets(source_format, targets, via)
    keep = [t for t in planned if t.id in named or t.id not in no_route or not all(_source_only(f) for f in runtime_formats(t))]
    no_route = {k: v for k, v in no_route.items() if k in {t.id for t in keep}}
    return with_options(keep, *overrides), no_route, (records if source_format != "onnx" or via else {})


@dataclass(frozen=True)
class Planned:
    """A check's targets, the reference first, each with its chain; those without a route or whose asked
    version could not be installed (id -> why); the plans recorded for the report; the versions asked; those
    whose runtime or a converter of their route is not available here (id -> why, and the install hint)."""

    targets: list[Target]
    no_route: dict[str, str]
    records: dict[str, dict]
    versions: dict[str, dict]
    unavailable: dict[str, tuple[str, str | None]] = field(default_factory=dict)


def check_gate_rules(targets: list[Target], rules: list[str]) -> None:
    known = {t.id for t in targets} | {t.platform for t in targets} | {"all"}
    for rule in rules:
        if rule.lstrip("+-") not in known:
            raise UsageError(f"--gate names '{rule.lstrip('+-')}', which is not among the targets of this check")


def for_options(source_format: str, opts, say=lambda s: None) -> Planned:
    """The targets a check's options (``settings.options.CheckOptions``) ask for, planned from the source:
    ``--targets``, ``--via``, the converter and runtime options, ``--gate`` checked against them, and one
    more target per asked version of a package they use (``--versions``)."""
    targets, no_route, records = for_check(source_format, opts.targets, opts.via,
                                           overrides=(opts.converter_options, opts.runtime_options))
    if getattr(opts, "generate", 0):
        targets = for_generation(targets)
    check_gate_rules(targets, opts.gate)
    from portability import matrix

    targets, skips, info = matrix.expand(targets, opts.versions, opts.cache_dir, say)
    no_route = {**no_route, **skips}
    return Planned(targets, no_route, records, info, unavailable(t for t in targets if t.id not in no_route))


def unavailable(targets) -> dict[str, tuple[str, str | None]]:
    """Of ``targets``, those that cannot run here (``targets.availability``: ``find_spec`` and file checks,
    nothing imported): id -> (why, the install hint)."""
    from portability.targets import availability

    found = {t.id: availability(t) for t in targets}
    return {tid: (a.reason, a.hint) for tid, a in found.items() if not a.ok}
