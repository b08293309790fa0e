#!/usr/bin/env python3
"""The mobile install, as a new user would do it: the wheel in a fresh virtual environment with its ``[mobile]``
extra, ``portability setup mobile``, ``setup web`` and ``setup tfjs``, then a check of the fixture LeNet on
``mobile/tflite-fp32`` and ``web/tfjs-wasm`` (the second stage of the install test; TensorFlow makes it too big
for the test suite's budget).

    python bench/bench_install.py [--wheel PATH] [--keep]

Builds the wheel from a copy of the tree (``pip wheel --no-deps``) unless ``--wheel`` names one; the venv has no
system site packages; every ``portability`` command runs from an empty folder with a fresh HOME (so a fresh cache,
``~/.cache/portability``) and runtime folder, ``PYTHONPATH`` unset. Downloads reuse this user's pip cache
(``PIP_CACHE_DIR``) and npm cache (``npm_config_cache``), as a second install on one machine would. Prints each
step's wall time and the venv's size; exits 1 at the first step that fails (its output's tail printed).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "fixtures" / "lenet.onnx"
TARGETS = "mobile/tflite-fp32,web/tfjs-wasm"


def size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def step(name: str, cmd: list[str], times: list[tuple[str, float]], **kw) -> subprocess.CompletedProcess:
    print(f"{name} ...", flush=True)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    dt = time.perf_counter() - t0
    times.append((name, dt))
    print(f"  {dt:7.1f} s  exit {p.returncode}", flush=True)
    if p.returncode != 0:
        print(f"error: {name} failed (exit {p.returncode}): {' '.join(cmd)}", file=sys.stderr)
        print((p.stdout[-4000:] + "\n" + p.stderr[-4000:]).strip(), file=sys.stderr)
        sys.exit(1)
    return p


def build_wheel(tmp: Path, times: list[tuple[str, float]]) -> Path:
    """``pip wheel --no-deps`` of a copy of the package, pyproject.toml and README.md (no build folder of the
    checkout's goes into it)."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "portability", src / "portability", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    step("pip wheel --no-deps", [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"),
                                 str(src)], times)
    (wheel,) = (tmp / "dist").glob("portability-*.whl")
    return wheel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", type=Path, help="install this wheel (default: build one from the tree)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (venv, home) and say where")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-install-"))
    times: list[tuple[str, float]] = []
    venv, home, run, empty = tmp / "venv", tmp / "home", tmp / "run", tmp / "empty"
    for d in (home, run, empty):
        d.mkdir(mode=0o700)
    real_home = Path.home()
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_RUNTIME_DIR": str(run), "COLUMNS": "200",
           # the downloads' caches are this user's: a second install on the machine, not a second download
           "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(real_home / ".cache" / "pip")),
           "npm_config_cache": os.environ.get("npm_config_cache", str(real_home / ".npm")),
           "npm_config_update_notifier": "false",
           # this machine's pip settings (index, certificates), as its users have them
           **{k: v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_CACHE_DIR"}}
    exe = str(venv / "bin" / "portability")

    def cli(name: str, *argv: str) -> subprocess.CompletedProcess:
        return step(name, [exe, *argv], times, env=env, cwd=empty, timeout=3600)

    try:
        wheel = args.wheel.resolve() if args.wheel else build_wheel(tmp, times)
        step("python -m venv", [sys.executable, "-m", "venv", str(venv)], times, timeout=300)
        step("pip install '<wheel>[mobile]'", [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                                f"{wheel}[mobile]"], times, env=env, cwd=empty, timeout=3600)
        installed = size(venv)
        cli("portability setup mobile", "setup", "mobile")
        cli("portability setup web", "setup", "web")
        cli("portability setup tfjs", "setup", "tfjs")
        p = cli(f"portability check lenet.onnx -t {TARGETS}", "check", str(MODEL), "-t", TARGETS)
        print("\n".join(ln for ln in p.stderr.splitlines() if re.match(r"\s+(pass|fail|error|skip)", ln)))
        print()
        for name, dt in times:
            print(f"{dt:7.1f} s  {name}")
        print(f"{sum(dt for _, dt in times):7.1f} s  in all")
        print(f"venv: {installed / 2**20:,.0f} MB after pip install, {size(venv) / 2**20:,.0f} MB after setup "
              f"mobile and tfjs; the cache (npm packages, converted models): "
              f"{size(home / '.cache' / 'portability') / 2**20:,.0f} MB")
        return 0
    finally:
        if venv.joinpath("bin", "portability").exists():
            subprocess.run([exe, "serve", "--stop"], capture_output=True, env=env, cwd=empty, timeout=60)
        if args.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
