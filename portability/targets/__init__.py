"""The target registry: every target id, grouped by platform, and `--targets` expansion.

Adding a target is one entry in its platform's module (``server.py``, ``web.py``, ``mobile.py``).
Targets from outside the package (a team's own runtime, the test suite's misbehaving doubles) come from
plugins: modules named in ``$PORTABILITY_PLUGINS`` (comma-separated, importable from ``sys.path``), imported
when the registry is first asked for, that call :func:`register`. Nothing is read at import time.
"""
from __future__ import annotations

import importlib
import os

from portability.core.errors import UsageError
from portability.targets.base import Target, load_class

PLATFORMS = ("server", "web", "mobile")
REFERENCE = "server/ort-cpu"
#: the environment variable naming the plugin modules
PLUGINS = "PORTABILITY_PLUGINS"

_registered: dict[str, Target] = {}
_imported: set[str] = set()


def register(*targets: Target) -> None:
    """Add targets to this process's registry (a plugin module calls this when it is imported)."""
    for t in targets:
        _registered[t.id] = t


def _plugins() -> None:
    for name in (n.strip() for n in os.environ.get(PLUGINS, "").split(",")):
        if name and name not in _imported:
            try:
                importlib.import_module(name)
            except ImportError as e:
                raise UsageError(f"${PLUGINS}: cannot import plugin '{name}' ({e})") from None
            _imported.add(name)


def registry() -> dict[str, Target]:
    _plugins()
    return {**_own(), **_registered}


def _own() -> dict[str, Target]:
    """The package's own targets (its platform modules')."""
    from portability.targets import mobile, server, web

    return {t.id: t for m in (server, web, mobile) for t in m.TARGETS}


def used_dists() -> tuple[str, ...]:
    """The Python distributions the targets' runtimes and the converters declare they use (``uses``), in
    registry order: what names a runtime, or a converter (its cache key)."""
    from portability.converters.registry import CONVERTERS
    from portability.core.availability import dists

    runtimes = dict.fromkeys(t.runtime for t in registry().values())
    return dists(load_class(c) for c in (*runtimes, *CONVERTERS))


def npm_dirs() -> tuple[str, ...]:
    """The npm folders the registered web targets' runtimes load (each browser runtime's own ``served_dirs``), in
    registry order: what ``portability setup web`` must have installed and the kept pages' server serves. Each
    runtime says its own (no list of engines here); a runtime module that fails to import adds none."""
    try:
        reg = registry()
    except UsageError:  # a plugin this process cannot import (a worker's, a service's): the targets it has
        reg = {**_own(), **_registered}
    out: dict[str, None] = {}
    for path in dict.fromkeys(t.runtime for t in reg.values() if t.platform == "web"):
        try:
            served = getattr(load_class(path), "served_dirs", None)
        except (ImportError, AttributeError):
            continue
        if served is not None:
            out.update(dict.fromkeys(served()))
    return tuple(out)


def availability(target: Target):
    """Whether ``target`` can run here: its runtime's own check, then each converter of its route's (the planned
    chain, or for a registry entry the route from an ONNX source, the usual one) — ``find_spec`` and file checks
    only, no framework imported. A runtime module that fails to import is unavailable; a target with no route
    from ONNX (one for other sources) is judged by its runtime (the check plans its route and checks it then);
    a target whose worker runs in another Python environment (``python``) is judged by its runtime here, its
    converters being that environment's."""
    from portability.core.availability import Availability, install

    try:
        a = load_class(target.runtime).availability()
    except (ImportError, AttributeError) as e:
        return Availability(False, f"runtime {target.runtime} cannot be imported ({e})", install("portability"))
    if not a.ok or target.python:
        return a
    for step in _route(target):
        try:
            c = load_class(step).availability()
        except (ImportError, AttributeError) as e:
            return Availability(False, f"converter {step} cannot be imported ({e})", install("portability"))
        if not c.ok:
            return c
    return a


def _route(target: Target) -> tuple[str, ...]:
    """The converters of ``target``'s chain: its planned steps, else those of its route from an ONNX source."""
    if target.converters:
        return tuple(path for path, _ in target.converters)
    from portability.converters.routes import NoRoute, plan

    try:
        return tuple(path for path, _ in plan("onnx", target).steps)
    except NoRoute:
        return ()


def expand(spec: str, reg: dict[str, Target] | None = None, reference: str = REFERENCE) -> list[Target]:
    """``"web,mobile/tflite-fp32"`` -> targets. A platform name means all its targets; ``all`` every one.

    Unavailable targets stay in the list: they are reported ``skipped`` with the reason, never dropped.
    The reference target (the source's own runtime: ``portability.sources.reference``) is always first.
    """
    reg = reg or registry()
    chosen: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part == "all":
            ids = [i for i in reg if i.split("/")[0] in PLATFORMS]
        elif "/" not in part:
            ids = [i for i in reg if i.split("/")[0] == part]
            if not ids:
                raise UsageError(f"unknown platform '{part}' (known: {', '.join(sorted({i.split('/')[0] for i in reg}))}, all)")
        elif part in reg:
            ids = [part]
        else:
            near = [i for i in reg if i.split("/")[0] == part.split("/")[0]]
            raise UsageError(f"unknown target '{part}'" + (f" (known: {', '.join(near)})" if near else ""))
        chosen += [i for i in ids if i not in chosen]
    if reference in chosen:
        chosen.remove(reference)
    return [reg[reference]] + [reg[i] for i in chosen]


__all__ = ["Target", "availability", "load_class", "registry", "expand", "REFERENCE", "PLATFORMS"]
