"""The wheel is the whole tool: the CLI needs no package its dependencies do not bring (``click``), says its
version, and every install hint it prints names a command that exists (an extra of pyproject.toml or a
``portability setup`` subcommand), never a checkout's ``scripts/``, ``requirements/`` or ``platforms/web``."""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, run_cli

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
PACKAGE = ROOT / "portability"


def _setup_commands() -> set[str]:
    from portability.cli import setup

    return {c.name for c in setup.app.registered_commands}


def hint_problems(text: str) -> list[str]:
    """What is wrong with an install hint: a ``pip install`` that names no ``portability[extra]`` (or plain
    ``portability``), an extra or a setup command that does not exist, a checkout's paths."""
    bad = [f"names a checkout's {w!r}" for w in ("scripts/", "requirements/", "platforms/web", "npm ci") if w in text]
    if "pip install" in text and not re.search(r"pip install (--[\w-]+ )*'?portability(\[|'|\b)", text):
        bad.append("a pip install that is not of portability")
    for extras in re.findall(r"portability\[([^\]]*)\]", text):
        bad += [f"no extra {e!r}" for e in extras.split(",") if e.strip() not in EXTRAS]
    bad += [f"no setup command {c!r}" for c in re.findall(r"portability setup ([\w-]+)", text) if c not in _setup_commands()]
    return bad


def test_the_cli_runs_without_click():
    """typer >= 0.20 vendors click and no longer installs it: --help and a usage error work without it."""
    block = ("import sys\n"
             "class NoClick:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name == 'click' or name.startswith('click.'):\n"
             "            raise ModuleNotFoundError(\"No module named 'click'\")\n"
             "sys.meta_path.insert(0, NoClick())\n"
             "sys.argv = ['portability'] + sys.argv[1:]\n"
             "from portability.cli.main import main\n"
             "main()\n")
    for args, rc in ((["--help"], 0), (["--version"], 0), (["check", "--no-such-flag"], 2)):
        p = subprocess.run([sys.executable, "-c", block, *args], capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == rc, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr, p.stderr


def test_version_from_the_command_and_the_module():
    from portability.cli.main import version

    assert version() == PYPROJECT["project"]["version"]
    p = run_cli("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"portability {version()}", (p.stdout, p.stderr)
    p = subprocess.run(["portability", "--version"], capture_output=True, text=True) if shutil.which("portability") else p
    assert p.returncode == 0 and version() in p.stdout


def test_every_install_command_exists():
    from portability.core.availability import INSTALL

    assert {k: hint_problems(v) for k, v in INSTALL.items() if hint_problems(v)} == {}
    assert hint_problems("pip install 'portability[nope]'") and hint_problems("portability setup nope")
    assert hint_problems("scripts/setup.sh") and hint_problems("pip install onnxruntime")


def _literals(tree: ast.AST):
    """Every string literal of a module that is not a docstring (f-strings' constant parts included)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            yield n.lineno, n.value


def test_no_message_of_the_package_names_a_checkout_or_a_bare_pip_install():
    """Hints are written as plain strings across runtimes, converters and the CLI: none may send a user to the
    checkout's scripts or to a bare ``pip install`` of a package (the device-side runner of a mobile bundle,
    which runs where portability is not installed, aside; ``setup web`` says the ``npm ci`` it runs)."""
    found = []
    for f in sorted(PACKAGE.rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        if rel.startswith("portability/bundle/runner/"):
            continue
        for line, text in _literals(ast.parse(f.read_text())):
            problems = [p for p in hint_problems(text)
                        if not (rel == "portability/cli/setup.py" and "npm ci" in p)]
            if problems:
                found.append(f"{rel}:{line}: {text!r}: {problems}")
    assert found == []


def test_targets_hints_name_commands_that_exist():
    p = run_cli("targets", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert {r["id"]: hint_problems(r["hint"]) for r in rows if r["hint"] and hint_problems(r["hint"])} == {}


def test_the_packaged_npm_lock_is_the_checkouts():
    """The wheel carries package.json and package-lock.json (``portability setup web`` installs from them); a
    checkout's setup script runs npm ci in platforms/web: the two must not drift."""
    for name in ("package.json", "package-lock.json"):
        assert (PACKAGE / "web" / "npm" / name).read_bytes() == (ROOT / "platforms" / "web" / name).read_bytes(), name
    data = PYPROJECT["tool"]["setuptools"]["package-data"]["portability"]
    assert {"web/npm/package.json", "web/npm/package-lock.json"} <= set(data)


def test_no_deps_pins_are_the_checkouts():
    """``portability setup mobile|tfjs|executorch`` install requirements/nodeps.txt's pins, every one of them."""
    from portability.cli.setup import NO_DEPS

    lines = (ROOT / "requirements" / "nodeps.txt").read_text().splitlines()
    pins = {ln.split("#")[0].strip() for ln in lines if ln.split("#")[0].strip()}
    packaged = {p for _, _, group in NO_DEPS.values() for p in group}
    assert packaged == pins
    assert {extra for extra, _, _ in NO_DEPS.values()} <= EXTRAS


def test_web_modules_are_looked_up_in_order(tmp_path, monkeypatch):
    from portability.web import paths

    monkeypatch.delenv(paths.MODULES_ENV, raising=False)
    monkeypatch.delenv("PORTABILITY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(paths, "PLATFORM_DIR", tmp_path / "no-checkout")
    cache = tmp_path / "xdg" / "portability" / "web-modules" / paths.lock_hash() / "node_modules"
    assert paths.modules_dir() == cache
    (tmp_path / "no-checkout" / "node_modules").mkdir(parents=True)
    assert paths.modules_dir() == tmp_path / "no-checkout" / "node_modules"
    monkeypatch.setenv(paths.MODULES_ENV, str(tmp_path / "mine"))
    assert paths.modules_dir() == tmp_path / "mine"


def test_setup_web_installs_into_the_cache_once(tmp_path):
    """``portability setup web`` runs npm ci of the packaged lock in <cache>/web-modules/<lock hash>/, once
    (a stand-in npm records its calls); --dry-run says what and where and changes nothing."""
    from portability.web.paths import ENGINE_DIRS, lock_hash

    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    made = " ".join(f"node_modules/{d}" for d in ENGINE_DIRS)
    (bin_dir / "npm").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"
                                 f"test -f package-lock.json || exit 9\nmkdir -p {made}\n")
    (bin_dir / "npm").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PORTABILITY_CACHE_DIR": str(tmp_path / "cache"),
           "PORTABILITY_CHROMIUM": str(tmp_path / "no-chromium")}
    folder = tmp_path / "cache" / "web-modules" / lock_hash()
    p = run_cli("setup", "web", "--dry-run", env=env)
    assert p.returncode == 0 and "would run: npm ci" in p.stdout and str(folder) in p.stdout, p.stdout + p.stderr
    assert not calls.exists() and not folder.exists()
    assert "apt-get install -y chromium" in p.stdout
    for _ in range(2):
        p = run_cli("setup", "web", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert str(folder / "node_modules") in p.stdout
    assert calls.read_text().splitlines() == ["ci --no-audit --no-fund --loglevel=error"]
    assert (folder / "package-lock.json").read_bytes() == (PACKAGE / "web" / "npm" / "package-lock.json").read_bytes()
    assert all((folder / "node_modules" / d).is_dir() for d in ENGINE_DIRS)


def test_setup_no_deps_dry_run_says_the_pip_command_or_ready():
    p = run_cli("setup", "mobile", "--dry-run")
    assert p.returncode in (0, 1), p.stderr
    out = p.stdout + p.stderr
    assert "ready" in out or "would run:" in out and "--no-deps" in out or "first pip install 'portability[mobile]'" in out


# --- the wheel, alone in a fresh virtual environment -----------------------------------------------------------

def _pins() -> Path:
    return ROOT / "requirements" / "main.txt"


def _build_wheel(tmp_path: Path) -> tuple[Path, str]:
    """``pip wheel --no-deps`` of a copy of the tree (the package, pyproject.toml, README.md), so no build folder
    of the checkout's goes into it; the wheel and pip's verbose output."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(PACKAGE, src / "portability", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "dist"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (wheel,) = out.glob("portability-*.whl")
    return wheel, p.stdout + p.stderr


@pytest.mark.slow
def test_the_wheel_builds_without_deprecation_warnings(tmp_path):
    import zipfile

    wheel, log = _build_wheel(tmp_path)
    assert not [ln for ln in log.splitlines() if "deprecat" in ln.lower()]
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"portability/web/npm/package.json", "portability/web/npm/package-lock.json",
            "portability/web/harness/index.html"} <= names


@pytest.mark.slow
def test_the_wheel_alone_in_a_fresh_venv(tmp_path):
    """From an empty folder, a fresh HOME and no PYTHONPATH, the installed wheel (and only its declared
    dependencies, at the project's pins) answers --help and --version, lists its targets with hints that name
    commands that exist, and checks the fixture LeNet on the server targets ONNX Runtime gives (exit 0)."""
    wheel, _ = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "-c", str(_pins()), str(wheel)],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0 and re.search(r"No matching distribution|Could not find a version|Network|connection",
                                       p.stderr, re.I):
        pytest.skip(f"the package index is not reachable: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, p.stderr[-3000:]
    home, empty = tmp_path / "home", tmp_path / "empty"
    home.mkdir(), empty.mkdir()
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "COLUMNS": "250"}

    def cli(*args: str, exe: list[str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*(exe or [str(venv / "bin" / "portability")]), *args], capture_output=True, text=True,
                              env=env, cwd=empty, timeout=600)

    assert cli("--help").returncode == 0
    for p in (cli("--version"), cli("--version", exe=[str(py), "-m", "portability"])):
        assert p.returncode == 0 and p.stdout.strip() == f"portability {PYPROJECT['project']['version']}", p
    p = cli("targets", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    hints = {r["id"]: r["hint"] for r in rows if r["hint"]}
    assert hints and {i: hint_problems(h) for i, h in hints.items() if hint_problems(h)} == {}
    assert {r["id"] for r in rows if r["available"]} >= {"server/ort-cpu", "server/onnx-reference"}
    assert "portability setup web" in hints["web/ort-wasm"] or "chromium" in hints["web/ort-wasm"]
    p = cli("targets")
    assert p.returncode == 0 and hint_problems(p.stdout) == [], p.stdout
    p = cli("setup", "web", "--dry-run")
    assert p.returncode == 0 and str(home / ".cache" / "portability" / "web-modules") in p.stdout, p.stdout + p.stderr
    p = cli("check", str(FIXTURES / "lenet.onnx"), "-t", "server")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "passed" in p.stderr.splitlines()[-1]
