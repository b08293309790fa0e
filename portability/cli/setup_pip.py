"""The Python packages pip alone cannot choose right: ONNX Runtime's GPU build in place of its CPU build, and
PyTorch's CPU build from PyTorch's own index (``portability setup gpu|torch``)."""
from __future__ import annotations

import typer


def _run(cmd: list[str]) -> bool:
    """Run one install command, its output the user's; whether it succeeded."""
    import subprocess

    typer.echo(f"$ {' '.join(cmd)}", err=True)
    return subprocess.run(cmd).returncode == 0



def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def gpu_plan() -> tuple[str, list[list[str]]]:
    """(what is installed now, the commands that swap onnxruntime-gpu in at the installed onnxruntime's version); no
    commands when it is in already. Raises UsageError when no onnxruntime is installed."""
    import sys

    from portability.core.errors import UsageError
    from portability.core.availability import install

    cpu, gpu = _version("onnxruntime"), _version("onnxruntime-gpu")
    if cpu is None and gpu is None:
        raise UsageError(f"onnxruntime is not installed: {install('portability')}")
    if cpu is None:
        return f"onnxruntime-gpu {gpu}", []
    pip = [sys.executable, "-m", "pip"]
    # both present: they share one folder, so both go and the GPU build comes back alone
    remove = ["onnxruntime"] + (["onnxruntime-gpu"] if gpu else [])
    return (f"onnxruntime {cpu}" + (f" and onnxruntime-gpu {gpu}" if gpu else ""),
            [[*pip, "uninstall", "-y", *remove], [*pip, "install", f"onnxruntime-gpu=={cpu}"]])


def gpu(dry_run: bool) -> int:
    """Swap onnxruntime for onnxruntime-gpu of the same version (server/ort-cuda): they install the same module, and pip
    installing both leaves whichever came last. A later pip install of portability brings onnxruntime back: run this
    again then. Needs a CUDA GPU to be of use."""
    have, cmds = gpu_plan()
    if not cmds:
        typer.echo(f"gpu: ready ({have})")
        return 0
    if not _perform(cmds, dry_run):
        return 1
    if not dry_run:
        typer.echo(f"gpu: ready (onnxruntime-gpu {_version('onnxruntime-gpu')}, was {have})")
    return 0


def _perform(cmds: list[list[str]], dry_run: bool, note=lambda cmd: "") -> bool:
    """Run ``cmds`` in turn (``dry_run``: say each, with ``note(cmd)``); False at the first that fails."""
    for cmd in cmds:
        if dry_run:
            typer.echo(f"would run: {' '.join(cmd)}{note(cmd)}")
        elif not _run(cmd):
            typer.echo(f"error: {' '.join(cmd[1:])} failed", err=True)
            return False
    return True


#: PyTorch as the [torch] extra has it: the version requirements/torch.txt pins, from PyTorch's CPU index (PyPI's
#: Linux wheels bring several GB of CUDA packages); then the rest of the extra
TORCH = "2.13.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_SIZE = "about 200 MB to download, 750 MB installed"
TORCH_EXTRA = ("onnxscript~=0.7.2", "onnx-ir~=1.1.0")


def torch_plan() -> list[list[str]]:
    """The pip commands still needed for the [torch] extra with the CPU build of PyTorch (none when it is in)."""
    import sys

    from packaging.requirements import Requirement

    pip = [sys.executable, "-m", "pip", "install"]
    cmds = []
    have = _version("torch")
    if have is None or have.split("+")[0] != TORCH:
        cmds.append([*pip, "--index-url", TORCH_INDEX, f"torch=={TORCH}"])
    rest = [r for r in TORCH_EXTRA
            if (v := _version(Requirement(r).name)) is None or not Requirement(r).specifier.contains(v)]
    if rest:
        cmds.append([*pip, *rest])
    return cmds


def torch(dry_run: bool) -> int:
    """Install PyTorch's CPU build at the tested version from PyTorch's own index (about 200 MB to download, 750 MB
    installed; never a CUDA build), then the rest of the \\[torch] extra: torch.export sources, server/torch and the
    PyTorch -> ONNX exporters."""
    cmds = torch_plan()
    if not cmds:
        typer.echo(f"torch: ready (torch {_version('torch')})")
        return 0
    if not _perform(cmds, dry_run, lambda cmd: f" ({TORCH_SIZE})" if any(a.startswith("torch==") for a in cmd) else ""):
        return 1
    if not dry_run:
        typer.echo(f"torch: ready (torch {_version('torch')})")
    return 0
