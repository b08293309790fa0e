"""The targets of a check with one more per asked version of a package they use: ``<target id>@<version>``,
a cross-check whose worker runs in that version's environment (``environments``)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from portability.core.target import Target, load_class
from portability.matrix.environments import build
from portability.matrix.packages import PACKAGES, installed


def uses(target: Target) -> set[str]:
    """The packages a target's runtime and converters declare they use."""
    names = set(getattr(load_class(target.runtime), "uses", ()) or ())
    for conv, _ in target.converters:
        names |= set(getattr(load_class(conv), "uses", ()) or ())
    return names


def expand(targets: list[Target], asked: dict[str, list[str]], cache_dir: Path | None = None, say=lambda s: None
           ) -> tuple[list[Target], dict[str, str], dict[str, dict]]:
    """(the targets with one more per asked version of a package they use, skip reasons of versions that
    could not be installed, {versioned target id: {"base", "package", "version"}}). ``asked``: the parsed
    flag (``parse``), empty for a check without ``--versions``; ``cache_dir``: the cache the environments
    are built in (None: the default one)."""
    if not asked:
        return targets, {}, {}
    from portability.core.dirs import default_root

    cache_root = Path(cache_dir) if cache_dir else default_root()
    out, skip, info = list(targets), {}, {}
    for name, versions in asked.items():
        pkg = PACKAGES[name]
        have = installed(pkg)
        users = [t for t in targets if name in uses(t)]
        if not users:
            say(f"--versions {name}: no target of this check uses it")
            continue
        for t in users:
            info.setdefault(t.id, {"base": t.id, "package": name, "version": have})
        for v in versions:
            if v == have:
                continue
            env = build(name, v, cache_root, say)
            for t in users:
                vt = replace(t, id=f"{t.id}@{v}", python=env.python, env=env.worker_env(), gating=False,
                             description=f"{t.description} ({name} {v})".strip())
                out.append(vt)
                info[vt.id] = {"base": t.id, "package": name, "version": v}
                if env.error:
                    skip[vt.id] = f"{name} {v} cannot be installed here: {env.error}"
    return out, skip, info
