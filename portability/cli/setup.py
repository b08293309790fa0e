"""``portability setup ...``: one-time provisioning of what ``pip install 'portability[x]'`` cannot install: the web
harness's npm packages (into the user's cache), the Python packages that must be installed without their declared
dependencies (which would downgrade the stack), the ARM64 emulator, environments of their own."""
from __future__ import annotations

import typer

app = typer.Typer(help="Provision optional runtimes (one-time, into the cache directory).", no_args_is_help=True)

DryRunOpt = typer.Option(False, "--dry-run", help="Say what would be installed, and where; change nothing.")

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
def web(dry_run: bool = DryRunOpt) -> int:
    """Install the web harness's pinned npm packages (npm ci of the packaged package-lock.json) into the user's cache,
    <cache>/web-modules/<lock hash>/node_modules, once per lock; and say whether Chromium is there. Needs npm."""
    import os
    import shutil

    from portability.web import paths

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
            typer.echo("error: npm is not installed (apt-get install -y nodejs npm)", err=True)
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
    of the mobile targets), after pip install 'portability[mobile]'."""
    return _no_deps("mobile", dry_run)


@app.command("tfjs")
def tfjs(dry_run: bool = DryRunOpt) -> int:
    """Install the TensorFlow.js converter (tensorflowjs, tensorflow-hub, tf-keras) at their pins without their
    declared dependencies (the web/tfjs-* targets' converter), after pip install 'portability[tensorflow]'."""
    return _no_deps("tfjs", dry_run)


@app.command("executorch")
def executorch(dry_run: bool = DryRunOpt) -> int:
    """Install ExecuTorch and torchao at their pins without their declared dependencies (some thirty packages that
    exporting, lowering and running do not need), after pip install 'portability[torch]'."""
    return _no_deps("executorch", dry_run)


@app.command("arm64")
def arm64(
    cache_dir: str = typer.Option(None, "--cache-dir", help="Cache root (default: $PORTABILITY_CACHE_DIR or ~/.cache/portability)."),
) -> int:
    """Build the ARM64 root filesystem (Debian arm64 + aarch64 LiteRT and onnxruntime) run under
    qemu-aarch64-static by the mobile/arm64-* targets. Needs qemu-user-static and debootstrap."""
    from pathlib import Path

    from portability.core.errors import UsageError

    try:
        from portability.mobile import arm64 as provisioner
    except ImportError:
        raise UsageError("ARM64 emulation is not part of this installation") from None
    root = provisioner.provision(Path(cache_dir) if cache_dir else None, log=lambda m: typer.echo(m, err=True))
    typer.echo(f"ARM64 emulator ready: {root}")
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
