"""What the OS sandbox (``core.sandbox``) of each process of a check allows: its workers and the services
that read model content. Every such process reads the model's folder, the run's folder, the cache and the
provisioned environments (the ARM64 root file system, MXNet's venv, the converters that live apart); a worker writes its own folder, and
the cache's artifact store only while it converts; a web worker reaches its browser's DevTools socket (a Unix
socket in the browser's private profile folder) and serves its page on a loopback port of its own."""
from __future__ import annotations

from pathlib import Path

from portability.core.sandbox import Sandbox


def cache_root(cache_dir: Path | None) -> Path:
    from portability.workers.cache import default_root

    return Path(cache_dir) if cache_dir else default_root()


def readable(model_path: Path, workdir: Path, cache_dir: Path | None) -> tuple[str, ...]:
    from portability.core import mxnet_env
    from portability.core.dirs import tools_root
    from portability.mobile import arm64
    from portability.sources import model_folder

    return (str(model_folder(model_path)), str(workdir), str(cache_root(cache_dir)), str(arm64.home()),
            str(mxnet_env.venv_dir()), str(tools_root()))


def shared(mode: str, read: tuple[str, ...]) -> dict:
    """A service's sandbox before it adds the folder it writes."""
    return Sandbox(mode=mode, read=read).to_dict()


def worker(mode: str, read: tuple[str, ...], wdir: Path, cache_dir: Path | None, use_cache: bool, network: str,
           services: dict[str, str]) -> dict:
    """A target's worker: ``network`` is its runtime's (``Runtime.network``), ``services`` its leased
    endpoints. A web worker without a shared browser starts a browser of its own, which needs more than
    this sandbox gives: unsandboxed then, unless the sandbox is required."""
    artifacts = cache_root(cache_dir) / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    if network == "browser" and not services and mode == "auto":
        mode = "off"
    return Sandbox(mode=mode, read=read, write=(str(wdir),),
                   write_until_narrowed=(str(artifacts),) if use_cache else (), bind=network == "browser").to_dict()
