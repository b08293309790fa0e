"""``portability setup ...``: one-time provisioning of what ``pip install 'portability[x]'`` cannot install: the web
harness's npm packages (into the user's cache), the Python packages that must be installed without their declared
dependencies (which would downgrade the stack), the ARM64 emulator, environments of their own."""
from __future__ import annotations

import typer

from portability.cli import setup_pip
from portability.cli.setup_pip import _run, _version  # noqa: F401  (the other commands' installs)

app = typer.Typer(help="Provision optional runtimes (one-time, into the cache directory).", no_args_is_help=True)

DryRunOpt = typer.Option(False, "--dry-run", help="Say what would be installed, and where; change nothing.")
WithDepsOpt = typer.Option(False, "--with-deps", help="Also install the Debian packages it needs with apt-get "
                           "(as root; otherwise print the apt-get line to run).")

#: the Debian packages the platforms need, each with the program that shows it is installed
DEBIAN = {"chromium": "chromium", "npm": "npm", "qemu-user-static": "qemu-aarch64-static", "debootstrap": "debootstrap"}

#: packages installed with ``pip install --no-deps`` (their declared pins would downgrade the stack; the same pins as
#: a checkout's requirements/nodeps.txt), per setup command, each after the extra it completes
NO_DEPS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "mobile": ("mobile", ("tensorflow", "ai_edge_litert"), ("tf-keras==2.21.0", "onnx2tf==1.29.24")),
    "tfjs": ("tensorflow", ("tensorflow",), ("tf-keras==2.21.0", "tensorflowjs==4.22.0", "tensorflow-hub==0.16.1",
                                             "scattertext==0.2.2")),
    "executorch": ("torch", ("torch",), ("executorch==1.5.1", "torchao==0.18.0", "ruamel.yaml==0.19.1",
                                         "tabulate==0.10.0")),
}


def _missing_pins(pins: tuple[str, ...]) -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pin in pins:
        name, _, want = pin.partition("==")
        try:
            if version(name) == want:
                continue
        except PackageNotFoundError:
            pass
        out.append(pin)
    return out


def _no_deps(command: str, dry_run: bool) -> int:
    """Install ``NO_DEPS[command]`` into this Python with ``--no-deps``; idempotent."""
    import importlib.util
    import subprocess
    import sys

    from portability.core.availability import install

    extra, modules, pins = NO_DEPS[command]
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        typer.echo(f"error: {', '.join(absent)} not installed: first {install(extra)}", err=True)
        return 1
    todo = _missing_pins(pins)
    if not todo:
        typer.echo(f"{command}: ready ({', '.join(pins)})")
        return 0
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *todo]
    if dry_run:
        typer.echo(f"would run: {' '.join(cmd)}")
        return 0
    typer.echo(f"installing (without their declared dependencies): {', '.join(todo)}", err=True)
    if subprocess.run(cmd).returncode != 0:
        typer.echo(f"error: pip could not install {', '.join(todo)}", err=True)
        return 1
    typer.echo(f"{command}: ready ({', '.join(pins)})")
    return 0


@app.command("web")
def web(dry_run: bool = DryRunOpt, with_deps: bool = WithDepsOpt) -> int:
    """Install the web harness's pinned npm packages (npm ci of the packaged package-lock.json, about 508 MB) into the
    user's cache, <cache>/web-modules/<lock hash>/node_modules, once per lock; and say whether Chromium is there.
    Needs npm (--with-deps: Debian's chromium and npm)."""
    import os
    import shutil

    from portability.web import paths

    if with_deps and system_packages(("chromium", "npm"), dry_run) != 0:
        return 1

    dest = paths.cache_modules_dir()
    complete = _npm_complete(dest)
    if complete:
        typer.echo(f"npm packages: ready in {dest}")
    elif dry_run:
        typer.echo(f"would run: npm ci --no-audit --no-fund (package.json and package-lock.json from {paths.NPM_DIR}) "
                   f"into {dest}")
    else:
        npm = shutil.which("npm")
        if npm is None:
            typer.echo("error: npm is not installed (apt-get install -y npm, or: portability setup web --with-deps)",
                       err=True)
            return 1
        if not _npm_ci(npm, paths.NPM_DIR, dest):
            return 1
        typer.echo(f"npm packages: installed in {dest}")
    used = paths.modules_dir()
    if used != dest:
        why = f"${paths.MODULES_ENV}" if os.environ.get(paths.MODULES_ENV) else "this checkout's"
        typer.echo(f"the web targets use {why} npm packages first: {used}")
    chromium = paths.chromium_path()
    if os.access(chromium, os.X_OK):
        typer.echo(f"Chromium: {chromium}")
    else:
        typer.echo(f"Chromium: not found at {chromium}; install it (Debian, Ubuntu): apt-get install -y chromium "
                   "(or name one with $PORTABILITY_CHROMIUM)")
    return 0


READY = ".portability-ready"


def _npm_complete(modules) -> bool:
    """Whether ``npm ci`` finished there (its stamp) and every folder the engines load is in place."""
    from portability.web.paths import ENGINE_DIRS

    return (modules.parent / READY).is_file() and all((modules / d).is_dir() for d in ENGINE_DIRS)


def _npm_ci(npm: str, src, modules) -> bool:
    """``npm ci`` of ``src``'s manifest and lock in a fresh folder beside ``modules``' own, renamed to it once done:
    a run that fails or is killed leaves no half-made folder where the targets look."""
    import os
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    folder = modules.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(src / name, tmp / name)
        typer.echo(f"npm ci in {tmp} (a minute or two, once)", err=True)
        p = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=tmp)
        if p.returncode != 0:
            typer.echo(f"error: npm ci failed (exit {p.returncode})", err=True)
            return False
        (tmp / READY).write_text("npm ci\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@app.command("mobile")
def mobile(dry_run: bool = DryRunOpt) -> int:
    """Install onnx2tf and tf-keras at their pins without their declared dependencies (the ONNX -> TFLite converter
    of the mobile targets), after pip install 'portability\\[mobile]'."""
    return _no_deps("mobile", dry_run)


@app.command("tfjs")
def tfjs(dry_run: bool = DryRunOpt) -> int:
    """Install the TensorFlow.js converter (tensorflowjs, tensorflow-hub, tf-keras) at their pins without their
    declared dependencies (the web/tfjs-* targets' converter), after pip install 'portability\\[tensorflow]'."""
    return _no_deps("tfjs", dry_run)


@app.command("executorch")
def executorch(dry_run: bool = DryRunOpt) -> int:
    """Install ExecuTorch and torchao at their pins without their declared dependencies (some thirty packages that
    exporting, lowering and running do not need), after portability setup torch."""
    return _no_deps("executorch", dry_run)


@app.command("arm64")
def arm64(
    cache_dir: str = typer.Option(None, "--cache-dir", help="Cache root (default: $PORTABILITY_CACHE_DIR or ~/.cache/portability)."),
    with_deps: bool = WithDepsOpt,
    dry_run: bool = DryRunOpt,
) -> int:
    """Build the ARM64 root filesystem (Debian arm64 + aarch64 LiteRT and onnxruntime, about 480 MB) run under
    qemu-aarch64-static by the mobile/arm64-* targets. Needs qemu-user-static and debootstrap, root, and the network
    once."""
    from pathlib import Path

    from portability.core.errors import UsageError

    try:
        from portability.mobile import arm64 as provisioner
    except ImportError:
        raise UsageError("ARM64 emulation is not part of this installation") from None
    root = Path(cache_dir) if cache_dir else None
    if provisioner.status(root)[0]:
        typer.echo(f"arm64: ready in {provisioner.home(root)}")
        return 0
    if with_deps and system_packages(("qemu-user-static", "debootstrap"), dry_run) != 0:
        return 1
    if dry_run:
        typer.echo(f"would build: a Debian bookworm arm64 root file system with aarch64 LiteRT and onnxruntime in "
                   f"{provisioner.home(root)} (debootstrap as root, about 480 MB, a few minutes)")
        return 0
    try:
        d = provisioner.provision(root, log=lambda m: typer.echo(m, err=True))
    except RuntimeError as e:
        typer.echo(f"error: {e}", err=True)
        return 1
    typer.echo(f"ARM64 emulator ready: {d}")
    return 0


@app.command("mxnet")
def mxnet(
    force: bool = typer.Option(False, "--force", help="Rebuild the environment from scratch."),
) -> int:
    """Build MXNet's own virtual environment (mxnet 1.9.1, numpy 1.26, onnx 1.18, onnxruntime) in the cache
    dir, where the study trains its MXNet models and exports them to ONNX. Needs python3-venv and PyPI, once."""
    from portability.core import mxnet_env

    d = mxnet_env.provision(log=lambda m: typer.echo(m, err=True), force=force)
    typer.echo(f"MXNet environment ready: {d}")
    return 0


def _tool(module: str, package: str = "portability.converters") -> int:
    import importlib

    m = importlib.import_module(f"{package}.{module}")
    try:
        d = m.provision(log=lambda line: typer.echo(line, err=True))
    except RuntimeError as e:
        typer.echo(f"error: {m.TOOL.package} {m.VERSION} could not be installed: {e}", err=True)
        return 1
    typer.echo(f"{m.TOOL.package} {m.VERSION} ready: {d}")
    return 0


@app.command("onnx2tf2")
def onnx2tf2() -> int:
    """Install onnx2tf 2.x (its direct TFLite backend) into a package folder of its own: the second ONNX ->
    TFLite converter, taken with --via TfliteFromOnnx2. About a second, once."""
    return _tool("onnx2tf2")


@app.command("litert-torch")
def litert_torch() -> int:
    """Build litert-torch's virtual environment (it sees this environment's packages; torch, TensorFlow and
    numpy stay the installed ones): PyTorch's native route to TFLite. Half a minute, once."""
    return _tool("litert_torch")


@app.command("transformers")
def transformers() -> int:
    """Install Hugging Face transformers (and the packages it needs that this environment lacks) into a folder
    of its own: what `study --zoo transformers` builds its models with. About ten seconds, once."""
    return _tool("transformers", "portability.study")


def _have(program: str) -> bool:
    import os
    import shutil

    if program == "chromium":
        from portability.web.paths import chromium_path

        return os.access(chromium_path(), os.X_OK)
    return bool(shutil.which(program) or any(os.access(f"{d}/{program}", os.X_OK) for d in ("/usr/sbin", "/sbin")))


def missing_system_packages(packages: tuple[str, ...] = tuple(DEBIAN)) -> list[str]:
    """The Debian packages of ``packages`` (keys of DEBIAN) whose program is not here."""
    return [pkg for pkg in packages if not _have(DEBIAN[pkg])]


def apt_line(packages: list[str]) -> str:
    return f"apt-get update && apt-get install -y {' '.join(packages)}"


def system_packages(packages: tuple[str, ...], dry_run: bool) -> int:
    """Install the missing ones of ``packages`` with apt-get when root; otherwise print the apt-get line (exit 1)."""
    import os
    import shutil

    todo = missing_system_packages(packages)
    if not todo:
        typer.echo(f"system packages: ready ({', '.join(packages)})")
        return 0
    if dry_run:
        typer.echo(f"would run: {apt_line(todo)}")
        return 0
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        typer.echo(f"error: {', '.join(todo)} not installed; as root run: {apt_line(todo)}", err=True)
        return 1
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    import subprocess

    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", *todo]):
        typer.echo(f"$ {' '.join(cmd)}", err=True)
        if subprocess.run(cmd, env=env).returncode != 0:
            typer.echo(f"error: {' '.join(cmd)} failed", err=True)
            return 1
    typer.echo(f"system packages: installed {', '.join(todo)}")
    return 0


@app.command("gpu")
def gpu(dry_run: bool = DryRunOpt) -> int:
    """Swap onnxruntime for onnxruntime-gpu of the same version (server/ort-cuda): they install the same module, and pip
    installing both leaves whichever came last. A later pip install of portability brings onnxruntime back: run this
    again then. Needs a CUDA GPU to be of use."""
    return setup_pip.gpu(dry_run)


@app.command("torch")
def torch(dry_run: bool = DryRunOpt) -> int:
    """Install PyTorch's CPU build at the tested version from PyTorch's own index (about 200 MB to download, 750 MB
    installed; never a CUDA build), then the rest of the \\[torch] extra: torch.export sources, server/torch and the
    PyTorch -> ONNX exporters."""
    return setup_pip.torch(dry_run)


def _prerequisite(command: str) -> str | None:
    """Why a no-deps setup command cannot run yet (the extra it completes is missing), or None."""
    import importlib.util

    from portability.core.availability import install

    extra, modules, _ = NO_DEPS[command]
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"{', '.join(absent)} not installed: first {install(extra)}" if absent else None


@app.command("all")
def all_(
    with_deps: bool = WithDepsOpt,
    dry_run: bool = DryRunOpt,
) -> int:
    """Set up every platform this installation's extras allow, in order: the Debian packages (--with-deps), web,
    mobile, tfjs, executorch, arm64. Idempotent: what is set up already is only checked. A step whose extra is not
    installed is skipped with the pip install that enables it; exit 1 when a step failed."""
    import os

    steps = [("web", lambda: web(dry_run=dry_run, with_deps=False)),
             ("mobile", lambda: _no_deps("mobile", dry_run)),
             ("tfjs", lambda: _no_deps("tfjs", dry_run)),
             ("executorch", lambda: _no_deps("executorch", dry_run)),
             ("arm64", lambda: arm64(cache_dir=None, with_deps=False, dry_run=dry_run))]
    if with_deps:
        steps.insert(0, ("system packages", lambda: system_packages(tuple(DEBIAN), dry_run)))
    failed, skipped = [], []
    for i, (name, step) in enumerate(steps, 1):
        typer.echo(f"[{i}/{len(steps)}] {name}")
        why = _prerequisite(name) if name in NO_DEPS else None
        if name == "arm64" and why is None and not dry_run:
            from portability.mobile import arm64 as provisioner

            todo = missing_system_packages(("qemu-user-static", "debootstrap"))
            if not provisioner.status()[0] and (todo or os.geteuid() != 0):
                why = (f"needs root and {', '.join(todo)}: {apt_line(todo)} (or --with-deps)" if todo else "needs root")
        if why:
            typer.echo(f"{name}: skipped ({why})")
            skipped.append(name)
        elif step() != 0:
            failed.append(name)
    ok = [n for n, _ in steps if n not in failed and n not in skipped]
    done = f"{len(ok)} checked, nothing changed (dry run)" if dry_run else f"{len(ok)} ready"
    typer.echo(f"setup all: {done}" + (f"; skipped: {', '.join(skipped)}" if skipped else "")
               + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
