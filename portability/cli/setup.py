"""``portability setup ...``: one-time provisioning of runtimes that live outside Python packages."""
from __future__ import annotations

import typer

app = typer.Typer(help="Provision optional runtimes (one-time, into the cache directory).", no_args_is_help=True)


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
