"""The runtime-version matrix: ``check --versions onnxruntime=1.20.1,1.31.1``.

Each version of a package other than the installed one lives in an environment of its own, built once in
the cache and reused: a Python package in a virtual environment that sees this one's packages
(``--system-site-packages``) with only that package installed over them; a browser package in a package
folder of its own beside the harness's other packages. The targets whose runtime or converters use the
package (``uses``, a class fact of runtimes and converters) run once more per such version, as
``<target id>@<version>``, in a fresh worker of that environment; the installed version keeps the plain id.
A version that cannot be installed here is a ``skipped`` target with the reason, never a crash.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from portability.core.errors import UsageError
from portability.core.target import Target, load_class

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Package:
    name: str  # as the user names it, and as runtimes/converters declare it in ``uses``
    kind: str  # "pip" | "npm"
    dist: str  # the pip distribution or npm package installed
    #: npm packages of the same release train that move with it (onnxruntime-web needs its -common)
    companions: tuple[str, ...] = ()


#: every package ``--versions`` takes (a literal registry)
PACKAGES = {
    "onnxruntime": Package("onnxruntime", "pip", "onnxruntime"),
    "tensorflow": Package("tensorflow", "pip", "tensorflow-cpu"),
    "ai-edge-litert": Package("ai-edge-litert", "pip", "ai-edge-litert"),
    "onnx2tf": Package("onnx2tf", "pip", "onnx2tf"),
    "tensorflowjs": Package("tensorflowjs", "pip", "tensorflowjs"),
    "onnxruntime-web": Package("onnxruntime-web", "npm", "onnxruntime-web", ("onnxruntime-common",)),
    "@tensorflow/tfjs": Package("@tensorflow/tfjs", "npm", "@tensorflow/tfjs"),
}
#: seconds an environment may take to build
BUILD_TIMEOUT_S = 900


def parse(specs: list[str] | None) -> dict[str, list[str]]:
    """``["onnxruntime=1.20.1,1.31.1", ...]`` -> {package: [versions]}; a UsageError names what is wrong."""
    out: dict[str, list[str]] = {}
    for spec in specs or []:
        for part in [spec] if "=" in spec else []:
            name, _, vs = part.partition("=")
            name = name.strip()
            if name not in PACKAGES:
                raise UsageError(f"--versions: unknown package '{name}' (known: {', '.join(PACKAGES)})")
            versions = [v.strip() for v in vs.split(",") if v.strip()]
            if not versions:
                raise UsageError(f"--versions {name}=: give at least one version (e.g. {name}=1.20.1,1.31.1)")
            out.setdefault(name, []).extend(v for v in versions if v not in out.get(name, []))
        if "=" not in spec:
            raise UsageError(f"--versions must look like PACKAGE=V1,V2 (e.g. onnxruntime=1.20.1,1.31.1), got '{spec}'")
    return out


def installed(pkg: Package) -> str | None:
    """The version this environment has (the harness's node_modules for a browser package)."""
    if pkg.kind == "npm":
        from portability.web.paths import package_version

        v = package_version(pkg.dist)
        return None if v == "absent" else v
    from importlib.metadata import PackageNotFoundError, version

    for dist in (pkg.dist, pkg.name):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


@dataclass(frozen=True)
class Env:
    """A built environment: the Python that runs its workers, or the package folder its pages load."""

    package: str
    version: str
    python: str | None = None
    web_modules: str | None = None
    error: str | None = None

    def worker_env(self) -> dict[str, str]:
        return {"PORTABILITY_WEB_MODULES": self.web_modules} if self.web_modules else {}


def envs_root(cache_root: Path) -> Path:
    return Path(cache_root) / "envs"


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    """None when ``cmd`` succeeded, else its last meaningful output line."""
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode == 0:
        return None
    lines = [ln.strip() for ln in (p.stderr + "\n" + p.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
    errs = [ln for ln in lines if ln.startswith("ERROR") or "error" in ln.lower()]
    return (errs or lines or [f"exit code {p.returncode}"])[0].split(" (from versions:")[0][:300]


def _build_pip(pkg: Package, version: str, folder: Path) -> Env:
    py = folder / "bin" / "python"
    err = _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(folder)])
    if err is None:
        # this environment's pip installs into the new one: only the package itself, never its dependencies
        # (they are this environment's, which the new one sees)
        err = _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                    str(_site(folder)), f"{pkg.dist}=={version}"])
    return Env(pkg.name, version, python=str(py)) if err is None else Env(pkg.name, version, error=err)


def _site(folder: Path) -> Path:
    return folder / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def _build_npm(pkg: Package, version: str, folder: Path) -> Env:
    """The harness's node_modules (hard links: no copy) with the package and its companions replaced by the
    asked version, installed by npm into a folder of its own."""
    from portability.web.paths import modules_dir

    staging = folder / "npm"
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "package.json").write_text(json.dumps({"name": "portability-version-env", "private": True}))
    err = _run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts",
                f"{pkg.dist}@{version}"], cwd=staging)
    if err is not None:
        return Env(pkg.name, version, error=err)
    merged = folder / "node_modules"
    main = modules_dir()
    try:
        _link_tree(main, merged)
        for name in (pkg.dist,) + pkg.companions:
            shutil.rmtree(merged / name, ignore_errors=True)
            if (staging / "node_modules" / name).is_dir():
                _link_tree(staging / "node_modules" / name, merged / name)
    except OSError as e:
        return Env(pkg.name, version, error=f"cannot assemble the package folder: {e}")
    return Env(pkg.name, version, web_modules=str(merged))


def _link_tree(src: Path, dst: Path) -> None:
    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link, symlinks=False, dirs_exist_ok=True)


def build(pkg_name: str, version: str, cache_root: Path, say=lambda s: None) -> Env:
    """The environment of ``pkg_name`` at ``version`` (built once, under a lock; later checks reuse it)."""
    pkg = PACKAGES[pkg_name]
    folder = envs_root(cache_root) / pkg.kind / f"{pkg.name.replace('/', '+')}-{version}"
    done = folder / "ready.json"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return Env(**json.loads(done.read_text()))
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        say(f"building the environment of {pkg.name} {version} (once: later checks reuse it)")
        env = (_build_npm if pkg.kind == "npm" else _build_pip)(pkg, version, folder)
        if env.error is None:
            done.write_text(json.dumps(env.__dict__))
        else:  # tried again by the next check (the registry may have been out of reach)
            shutil.rmtree(folder, ignore_errors=True)
        return env


def uses(target: Target) -> set[str]:
    """The packages a target's runtime and converters declare they use."""
    names = set(getattr(load_class(target.runtime), "uses", ()) or ())
    for conv, _ in target.converters:
        names |= set(getattr(load_class(conv), "uses", ()) or ())
    return names


def expand(targets: list[Target], asked: dict[str, list[str]], cache_root: Path, say=lambda s: None
           ) -> tuple[list[Target], dict[str, str], dict[str, dict]]:
    """(the targets with one more per asked version of a package they use, skip reasons of versions that
    could not be installed, {versioned target id: {"base", "package", "version"}})."""
    if not asked:
        return targets, {}, {}
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


def matrix(results, outputs: dict[str, dict], info: dict[str, dict]) -> dict:
    """The report's ``versions``: per base target, each version's status and its worst absolute difference
    from the other versions' outputs."""
    from portability.metrics import drift

    if not info:
        return {}
    by_id = {r.id: r for r in results}
    rows: dict[str, dict] = {}
    for tid, meta in info.items():
        r = by_id.get(tid)
        if r is None:
            continue
        rows.setdefault(meta["base"], {"target": meta["base"], "package": meta["package"], "cells": {}})
        rows[meta["base"]]["cells"][meta["version"] or "installed"] = {"id": tid, "status": r.status}
    for row in rows.values():
        cells = row["cells"]
        for v, cell in cells.items():
            worst = None
            for w, other in cells.items():
                a, b = outputs.get(cell["id"]), outputs.get(other["id"])
                if w == v or not a or not b:
                    continue
                per, _, _ = drift.compare(b, a)
                m = drift.worst({"outputs": per})[0] or 0.0
                worst = m if worst is None else max(worst, m)
            cell["worst_max_abs_vs_others"] = worst
    packages = sorted({r["package"] for r in rows.values()})
    return {"packages": {p: sorted({v for r in rows.values() if r["package"] == p for v in r["cells"]}) for p in packages},
            "rows": list(rows.values())}
