"""The environment of one version of a package, built once in the cache under a lock and reused by later
checks: a virtual environment that sees this one's packages with only that package installed over them
(pip), or the harness's package folder with the package and its companions replaced (npm)."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from portability.matrix.packages import PACKAGES, Package

#: seconds an environment may take to build
BUILD_TIMEOUT_S = 900


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
