"""The converter graph: the chain from a source to each target's runtime, found (``plan``).

Formats are nodes, registered converters (``portability.converters.registry``) are edges. A target names
its runtime (hence the format it reads) and its ``variant``; its chain is the source's snapshot, then the
shortest route to that format whose last step makes the variant — fewest steps, then lowest converter
``cost``, then names (deterministic). The shortest route is the framework's native one (Keras ->
SavedModel -> TFLite by TensorFlow's converter; ONNX only where a route needs it). ``via`` forces a hub:
a format the route must pass through (``onnx``) or a converter it must take (``OnnxFromTorchScript``).
A source already in the runtime's format runs as given, for the target of the default variant
(``fp32``) only. The reference target runs the source as given and is never routed ``via``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from portability.core.errors import UsageError
from portability.core.target import Target, load_class

#: a source as given counts as these variants (a .tflite file is run as it is, as the "fp32" target)
AS_GIVEN = {"quant": "fp32"}
_MAX_STEPS = 6


@dataclass(frozen=True)
class Edge:
    path: str
    name: str
    src: str
    dst: str
    variants: dict[str, tuple[str, ...]]
    cost: int
    snapshot: bool
    on_request: bool = False


@dataclass(frozen=True)
class Plan:
    """A target's chain: ``steps`` as (converter path, options), the ``route`` of formats it takes."""

    steps: tuple[tuple[str, dict[str, Any]], ...]
    route: tuple[str, ...]
    via: str | None = None

    def to_dict(self) -> dict[str, Any]:
        steps = [p.rsplit(":", 1)[1] + (f"({', '.join(f'{k}={v}' for k, v in o.items())})" if o else "") for p, o in self.steps]
        return {"route": list(self.route), "steps": steps, "via": self.via}


class NoRoute(Exception):
    """No chain of registered converters reaches the target's format (and variant, and ``via``)."""


@lru_cache(maxsize=1)
def edges() -> tuple[Edge, ...]:
    from portability.converters.registry import CONVERTERS

    out = []
    for path in CONVERTERS:
        c = load_class(path)
        out.append(Edge(path, c.__name__, c.input_format, c.output_format, dict(c.variants), c.cost, c.snapshot, c.on_request))
    return tuple(out)


def formats() -> set[str]:
    return {e.src for e in edges()} | {e.dst for e in edges()}


def check_via(via: str | None) -> None:
    if via and via not in formats() and via not in {e.name for e in edges()}:
        raise UsageError(f"--via '{via}' is neither a format ({', '.join(sorted(formats()))}) nor a converter "
                         f"({', '.join(e.name for e in edges() if not e.snapshot)})")


def runtime_format(target: Target) -> str:
    return load_class(target.runtime).input_format


def runtime_formats(target: Target) -> tuple[str, ...]:
    """Every format the target's runtime reads (its ``input_format`` first)."""
    cls = load_class(target.runtime)
    return tuple(dict.fromkeys((cls.input_format, *cls.input_formats)))


def _makes(edge: Edge, variant: dict[str, str]) -> dict[str, str] | None:
    """The options that make ``variant`` with ``edge`` (its last step), or None when it cannot. A
    converter that makes one value only (``Int8TfliteFromSavedModel``) takes no option for it. A target
    that names no variant wants the variant a source as given counts as (``AS_GIVEN``): a converter that
    makes only others (an int8 quantizer) is not its last step."""
    for k, v in {**AS_GIVEN, **variant}.items():
        if v not in edge.variants.get(k, (AS_GIVEN.get(k),)):
            return None
    return {k: v for k, v in variant.items() if len(edge.variants.get(k, ())) > 1}


def plan(source_format: str, target: Target, via: str | None = None) -> Plan:
    """The chain for ``target`` from a source of ``source_format``; NoRoute when there is none."""
    snap = next((e for e in edges() if e.snapshot and e.src == source_format), None)
    if snap is None:
        raise NoRoute(f"no converter reads {source_format} sources")
    wants = runtime_formats(target)
    best: tuple | None = None
    out_of: dict[str, list[Edge]] = {}
    for e in edges():
        if not e.snapshot and not (e.on_request and via != e.name):
            out_of.setdefault(e.src, []).append(e)

    def walk(fmt: str, taken: list[Edge], passed: bool) -> None:
        nonlocal best
        # a longer chain never beats the best found (the shortest wins): nor do the chains that extend it
        if len(taken) > _MAX_STEPS or (best is not None and len(taken) >= best[0][0]):
            return
        for e in out_of.get(fmt, ()):
            if e in taken:
                continue
            now = taken + [e]
            ok = passed or via in (e.dst, e.name)
            opts = _makes(e, target.variant) if e.dst in wants else None
            if opts is not None and ok:
                key = (len(now), sum(x.cost for x in now), tuple(x.name for x in now))
                if best is None or key < best[0]:
                    best = (key, now, opts)
            walk(e.dst, now, ok)

    if source_format in wants and not via and all(AS_GIVEN.get(k) == v for k, v in target.variant.items()):
        return Plan(((snap.path, {}),), (source_format,))
    walk(source_format, [], via in (None, source_format))
    if best is None:
        what = "|".join(wants) + (f" ({', '.join(f'{k} {v}' for k, v in target.variant.items())})" if target.variant else "")
        raise NoRoute(f"no converter route from {source_format} to {what}" + (f" via {via}" if via else ""))
    _, chain, opts = best
    steps = [(snap.path, {})] + [(e.path, {}) for e in chain[:-1]] + [(chain[-1].path, opts)]
    return Plan(tuple(steps), (source_format,) + tuple(e.dst for e in chain), via)
