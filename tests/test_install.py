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
    and the engines it ships beside it, which run where portability is not installed, aside; ``setup web`` says the
    ``npm ci`` it runs)."""
    found = []
    for f in sorted(PACKAGE.rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        if rel.startswith("portability/bundle/runner/") or rel == "portability/mobile/device_engines.py":
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


# --- ranges, setup gpu|torch|all, targets that tell the truth ------------------------------------------------

def _requirement_lines() -> list[str]:
    """Every requirement pyproject.toml declares (dependencies and extras), the extras naming portability aside."""
    opt = PYPROJECT["project"]["optional-dependencies"]
    return [r for r in [*PYPROJECT["project"]["dependencies"], *(x for v in opt.values() for x in v)]
            if not r.startswith("portability")]


def _pins() -> dict[str, str]:
    """requirements/*.txt's pins of the main environment (MXNet's own environment aside): name -> version."""
    from packaging.utils import canonicalize_name

    out = {}
    for f in ("main.txt", "nodeps.txt", "torch.txt"):
        for line in (ROOT / "requirements" / f).read_text().splitlines():
            spec = line.split("#")[0].strip()
            if spec:
                name, _, version = spec.partition("==")
                out[canonicalize_name(name)] = version
    return out


def test_every_range_is_bounded_around_its_pin():
    """pyproject.toml's rule (its comment): every requirement ``~=X.Y.Z`` of the version requirements/ pins, so an
    upper bound that admits patches only; every pin of requirements/ that pyproject names lies in its range."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins, problems = _pins(), []
    for line in _requirement_lines():
        r = Requirement(line)
        name = canonicalize_name(r.name)
        specs = list(r.specifier)
        if not any(s.operator in ("<", "<=", "==", "~=") for s in specs) or any(
                s.operator == "~=" and s.version.count(".") < 2 for s in specs):
            problems.append(f"{line}: no upper bound at the minor release")
        if name not in pins:
            problems.append(f"{line}: no pin in requirements/")
        elif not r.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{line}: the pin {name}=={pins[name]} is outside it")
    assert problems == []
    assert "gpu" not in EXTRAS  # onnxruntime-gpu and onnxruntime install over each other: `portability setup gpu`


def test_hints_for_gpu_and_torch_are_setup_commands():
    from portability.core.availability import INSTALL

    assert INSTALL["gpu"] == "portability setup gpu" and INSTALL["torch"] == "portability setup torch"
    assert {"gpu", "torch", "all", "web", "mobile", "arm64"} <= _setup_commands()


def _versions(monkeypatch, **have: str | None):
    from portability.cli import setup_pip

    monkeypatch.setattr(setup_pip, "_version", lambda dist: have.get(dist.replace("-", "_")))


def test_setup_gpu_swaps_in_the_same_version(monkeypatch, capsys):
    """Stand-ins for the installed versions: onnxruntime alone, both (the state a [gpu] extra left), the GPU build
    alone (ready, nothing to run), none (a usage error naming the fix)."""
    from portability.cli import setup_pip as setup
    from portability.core.errors import UsageError

    ran = []
    monkeypatch.setattr(setup, "_run", lambda cmd: ran.append(cmd[3:]) or True)
    _versions(monkeypatch, onnxruntime="1.31.1")
    assert setup.gpu(dry_run=True) == 0 and ran == []
    out = capsys.readouterr().out.splitlines()
    assert [ln.split(" -m pip ")[1] for ln in out] == ["uninstall -y onnxruntime", "install onnxruntime-gpu==1.31.1"]
    _versions(monkeypatch, onnxruntime="1.31.1", onnxruntime_gpu="1.30.0")
    assert setup.gpu(dry_run=False) == 0
    assert ran == [["uninstall", "-y", "onnxruntime", "onnxruntime-gpu"], ["install", "onnxruntime-gpu==1.31.1"]]
    ran.clear()
    _versions(monkeypatch, onnxruntime_gpu="1.31.1")
    assert setup.gpu(dry_run=False) == 0 and ran == [] and "gpu: ready" in capsys.readouterr().out
    _versions(monkeypatch)
    with pytest.raises(UsageError, match="pip install --force-reinstall portability"):
        setup.gpu(dry_run=True)


def test_setup_gpu_dry_run_names_the_installed_version():
    from importlib.metadata import version

    p = run_cli("setup", "gpu", "--dry-run")
    assert p.returncode == 0, p.stderr
    if "gpu: ready" not in p.stdout:
        assert f"pip install onnxruntime-gpu=={version('onnxruntime')}" in p.stdout, p.stdout


def test_setup_torch_takes_the_cpu_build_at_the_pinned_version(monkeypatch, capsys):
    from packaging.requirements import Requirement

    from portability.cli import setup_pip as setup

    (pin,) = [ln for ln in (ROOT / "requirements" / "torch.txt").read_text().splitlines() if ln.startswith("torch==")]
    assert setup.TORCH == pin.split("==")[1]
    extra = PYPROJECT["project"]["optional-dependencies"]["torch"]
    assert sorted(setup.TORCH_EXTRA) == sorted(r for r in extra if Requirement(r).name != "torch")
    _versions(monkeypatch)
    assert setup.torch(dry_run=True) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first.endswith(f"pip install --index-url https://download.pytorch.org/whl/cpu torch=={setup.TORCH} "
                          f"({setup.TORCH_SIZE})"), first
    assert second.endswith("pip install " + " ".join(setup.TORCH_EXTRA)), second
    _versions(monkeypatch, torch=f"{setup.TORCH}+cpu", onnxscript="0.7.9", onnx_ir="1.1.0")
    assert setup.torch(dry_run=True) == 0 and capsys.readouterr().out.startswith("torch: ready")
    _versions(monkeypatch, torch="2.99.0", onnxscript="0.7.2", onnx_ir="1.1.0")
    (only,) = setup.torch_plan()
    assert only[-3:] == ["--index-url", setup.TORCH_INDEX, f"torch=={setup.TORCH}"]


#: runs the CLI with some modules not findable (each finder of sys.meta_path answers None for them): argv[1] names
#: them, the rest is the command line; prints the heavy frameworks imported to stderr at the end
HIDING = """
import sys
hidden = set(filter(None, sys.argv[1].split(",")))
class Hide:
    def __init__(self, inner):
        self.inner = inner
    def find_spec(self, name, path=None, target=None):
        return None if name.split(".")[0] in hidden else self.inner.find_spec(name, path, target)
sys.meta_path[:] = [Hide(f) for f in sys.meta_path]
sys.argv = ["portability"] + sys.argv[2:]
from portability.cli.main import main
try:
    main()
finally:
    heavy = ("tensorflow", "torch", "onnx2tf", "keras", "tf_keras", "jax", "tensorflowjs", "openvino", "coremltools")
    print("imported:", ",".join(m for m in heavy if m in sys.modules), file=sys.stderr)
"""


def run_hiding(hidden: tuple[str, ...], *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDING, ",".join(hidden), *args], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, **(env or {})), timeout=300)


def imported(p: subprocess.CompletedProcess) -> str:
    return p.stderr.strip().splitlines()[-1]


def _setup_all_env(tmp_path: Path) -> dict:
    """A fresh cache, a stand-in npm that records its calls, and an ARM64 folder stamped as provisioned."""
    from portability.mobile import arm64
    from portability.web.paths import ENGINE_DIRS

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    made = " ".join(f"node_modules/{d}" for d in ENGINE_DIRS)
    (bin_dir / "npm").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'npm-calls'}\nmkdir -p {made}\n")
    (bin_dir / "npm").chmod(0o755)
    a = tmp_path / "arm64"
    for d in ("rootfs/usr/bin", "rootfs/opt/site"):
        (a / d).mkdir(parents=True)
    (a / "rootfs/usr/bin/python3.11").write_text("")
    (a / arm64.READY).write_text(json.dumps({"versions": {"stand-in": "1"}}))
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PORTABILITY_CACHE_DIR": str(tmp_path / "cache"),
            "PORTABILITY_ARM64_DIR": str(a), "PORTABILITY_CHROMIUM": sys.executable}


def test_setup_all_dry_run_lists_every_step_in_order_and_changes_nothing(tmp_path):
    env = {**_setup_all_env(tmp_path), "PORTABILITY_CHROMIUM": str(tmp_path / "no-chromium")}
    p = run_cli("setup", "all", "--dry-run", "--with-deps", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    steps = [ln for ln in p.stdout.splitlines() if re.match(r"\[\d/\d\] ", ln)]
    assert steps == ["[1/6] system packages", "[2/6] web", "[3/6] mobile", "[4/6] tfjs", "[5/6] executorch",
                     "[6/6] arm64"], p.stdout
    assert "would run: apt-get update && apt-get install -y chromium" in p.stdout
    assert "would run: npm ci" in p.stdout and "nothing changed (dry run)" in p.stdout.splitlines()[-1]
    assert not (tmp_path / "cache").exists() and not (tmp_path / "npm-calls").exists()


def test_setup_all_is_idempotent_and_skips_what_its_extras_lack(tmp_path):
    """With TensorFlow, LiteRT and PyTorch hidden, mobile, tfjs and executorch are skipped with the pip install that
    enables them (nothing is pip-installed); web runs the stand-in npm once; a second run only checks."""
    env = _setup_all_env(tmp_path)
    hidden = ("tensorflow", "ai_edge_litert", "torch")
    outs = []
    for _ in range(2):
        p = run_hiding(hidden, "setup", "all", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        outs.append(p.stdout)
        assert "mobile: skipped (tensorflow, ai_edge_litert not installed: first pip install 'portability[mobile]')" \
            in p.stdout
        assert "executorch: skipped (torch not installed: first portability setup torch)" in p.stdout
        assert re.search(r"arm64: (ready|skipped \(needs)", p.stdout), p.stdout
        said = [ln for ln in p.stdout.splitlines() if not ln.startswith(("the web targets use", "would run: npm ci"))]
        assert hint_problems("\n".join(said)) == []
    assert (tmp_path / "npm-calls").read_text().splitlines() == ["ci --no-audit --no-fund --loglevel=error"]
    assert "npm packages: installed" in outs[0] and "npm packages: ready" in outs[1]


def test_system_packages_as_a_user_print_the_apt_line(monkeypatch, capsys):
    from portability.cli import setup

    monkeypatch.setattr(setup, "_have", lambda program: program != "debootstrap")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert setup.system_packages(tuple(setup.DEBIAN), dry_run=False) == 1
    assert "as root run: apt-get update && apt-get install -y debootstrap" in capsys.readouterr().err
    monkeypatch.setattr(setup, "_have", lambda program: True)
    assert setup.system_packages(tuple(setup.DEBIAN), dry_run=False) == 0


def test_converters_declare_what_they_import_with_hints_that_exist():
    """onnx2tf imports tf_keras, onnx_graphsurgeon and sng4onnx and runs onnxsim: its converter declares them all."""
    from portability.converters.registry import CONVERTERS
    from portability.core.target import load_class

    onnx2tf = load_class("portability.converters.onnx2tf:SavedModelFromOnnx").requires
    assert {"tensorflow", "ai_edge_litert", "onnx2tf", "tf_keras", "onnx_graphsurgeon", "sng4onnx", "onnxsim"} <= set(onnx2tf)
    assert {"tensorflowjs", "tf_keras"} <= set(load_class("portability.converters.tfjs:TfjsFromSavedModel").requires)
    hints = {f"{c}: {m}": h for c in CONVERTERS for m, h in load_class(c).requires.items()}
    assert {k: hint_problems(h) for k, h in hints.items() if hint_problems(h)} == {}


@pytest.mark.parametrize("module", ["onnx_graphsurgeon", "sng4onnx", "tf_keras", "onnxsim"])
def test_targets_say_a_tflite_route_cannot_run_without_what_onnx2tf_imports(module):
    """``targets`` judges a target by its whole route from an ONNX source: with one of onnx2tf's imports missing, the
    TFLite and TF.js targets cannot run, and the hint names the extra or the setup command; nothing heavy imported."""
    p = run_hiding((module,), "targets", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["id"]: r for r in json.loads(p.stdout)}
    for tid in ("mobile/tflite-fp32", "mobile/tflite-int8", "web/tfjs-wasm"):
        r = rows[tid]
        assert not r["available"] and f"'{module}' is not installed" in r["reason"], r
        assert ("portability setup mobile" in r["hint"] or "portability[mobile]" in r["hint"]) and not hint_problems(r["hint"])
    assert rows["server/ort-cpu"]["available"] and rows["mobile/ort-mobile"]["available"]
    assert imported(p) == "imported:", imported(p)


def test_help_and_targets_import_no_framework():
    for args in (["--help"], ["targets", "--json"], ["setup", "all", "--dry-run"]):
        p = run_hiding((), *args)
        assert p.returncode == 0 and imported(p) == "imported:", (args, imported(p))


# --- the wheel, alone in a fresh virtual environment -----------------------------------------------------------

def _pins_file() -> Path:
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
    """From an empty folder, a fresh HOME (so a fresh cache) and runtime folder and no PYTHONPATH, the installed
    wheel (and only its declared dependencies, at the project's pins) answers --help and --version, lists its
    targets with hints that name commands that exist, and checks the fixture LeNet on the server targets ONNX
    Runtime gives (exit 0); then ``portability setup web`` (npm ci of the packaged lock into the fresh cache; npm's
    download cache is this user's, so a second run downloads nothing) and the check on web/ort-wasm passes in the
    system's Chromium, under the sandbox and through a resident session of the venv's own (stopped at the end)."""
    wheel, _ = _build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "-c", str(_pins_file()), str(wheel)],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0 and re.search(r"No matching distribution|Could not find a version|Network|connection",
                                       p.stderr, re.I):
        pytest.skip(f"the package index is not reachable: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, p.stderr[-3000:]
    home, empty, run = tmp_path / "home", tmp_path / "empty", tmp_path / "run"
    home.mkdir(), empty.mkdir(), run.mkdir(mode=0o700)
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_RUNTIME_DIR": str(run), "COLUMNS": "250"}

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
    try:
        p = cli("check", str(FIXTURES / "lenet.onnx"), "-t", "server")
        assert p.returncode == 0, p.stdout + p.stderr
        assert "passed" in p.stderr.splitlines()[-1]

        # the web stage: needs npm, Chromium and the npm registry (or this user's npm cache)
        if not (shutil.which("npm") and os.access("/usr/bin/chromium", os.X_OK)):
            pytest.skip("the web stage needs npm and /usr/bin/chromium")
        env["npm_config_cache"] = os.environ.get("npm_config_cache", str(Path.home() / ".npm"))
        env["npm_config_update_notifier"] = "false"
        p = cli("setup", "web")
        if p.returncode != 0 and re.search(r"ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|network", p.stderr, re.I):
            pytest.skip(f"the npm registry is not reachable: {p.stderr.strip().splitlines()[-1]}")
        modules = home / ".cache" / "portability" / "web-modules"
        assert p.returncode == 0 and f"npm packages: installed in {modules}" in p.stdout, p.stdout + p.stderr
        assert "Chromium: /usr/bin/chromium" in p.stdout, p.stdout
        p = cli("setup", "web")
        assert p.returncode == 0 and f"npm packages: ready in {modules}" in p.stdout, p.stdout + p.stderr
        rows = {r["id"]: r for r in json.loads(cli("targets", "--json").stdout)}
        assert rows["web/ort-wasm"]["available"], rows["web/ort-wasm"]
        p = cli("check", str(FIXTURES / "lenet.onnx"), "-t", "web/ort-wasm")
        assert p.returncode == 0, p.stdout + p.stderr
        assert re.search(r"pass\s+web/ort-wasm", p.stderr) and "passed" in p.stderr.splitlines()[-1], p.stderr
    finally:
        cli("serve", "--stop")
