"""One emulated ARM64 fork server per check, shared by its ARM64 targets' workers over a unix socket.

The check's process starts it on the first ARM64 target (``arm64_server.py --listen``: the emulated Python
imports numpy, LiteRT and ONNX Runtime once) and stops it at the end. Each worker connects and gets a
forked emulated child of its own, which serves the usual request/reply frames and exits with the
connection: a child that crashes costs its target only, and no target pays for the emulated start-up and
imports. A server that died, or that a hung or crashed target leaves unwell, is replaced for the targets
after it (``release(unwell=True)``) and stopped once no target uses it.

Models come by content: a worker reads its model file and sends the bytes with its ``load`` request, so
the emulator's OS sandbox reads its own root file system (``arm64.home()``) and none of the check's model,
run or artifact folders; of the sandbox it is given, it keeps the mode.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from portability.core.shared import SharedProcesses, stop_group
from portability.web.browser import short_tmp

#: how long the emulated server may take to import its runtimes and listen (seconds, under qemu)
START_TIMEOUT_S = 60.0
SOCKET = "arm64.sock"
LOG = "server.log"


class _Emulator:
    def __init__(self, sandbox: dict | None = None):
        from portability.mobile import arm64
        from portability.mobile.arm64 import SERVER

        ok, reason = arm64.status()
        if not ok:
            raise RuntimeError(reason)
        arm64.compile_bytecode()  # environments provisioned before it was part of provisioning
        self.folder = tempfile.mkdtemp(prefix="portability-arm64-", dir=short_tmp())
        self.endpoint = str(Path(self.folder) / SOCKET)
        self.stopped = False
        argv, env = arm64.command()
        env["OPENBLAS_NUM_THREADS"] = "1"  # numpy's BLAS is unused here: no idle threads to fork past
        argv = self._confined(argv, sandbox)
        with open(Path(self.folder) / LOG, "wb") as err:
            # stdin is the server's lifeline: it exits at EOF, when this process is gone
            self.proc = subprocess.Popen(argv + ["-u", str(SERVER), "--listen", self.endpoint], env=env, cwd=self.folder,
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)
        self._wait_socket()

    def _confined(self, argv: list[str], sandbox: dict | None) -> list[str]:
        """The emulator under the check's OS sandbox, in its mode: it reads its root file system only (models
        come by content, not from the check's folders), writes only its own folder, has no network."""
        from portability.core.sandbox import Sandbox, command
        from portability.mobile import arm64

        if not sandbox:
            return argv
        sb = Sandbox.from_dict(sandbox)
        sb = Sandbox(mode=sb.mode, read=(str(arm64.home()),), write=(self.folder,))
        return command(sb, argv)

    def _wait_socket(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = self.log_tail()
                self.stop()
                raise RuntimeError(f"the emulated ARM64 server exited at start (code {self.proc.returncode})"
                                   + (": " + " | ".join(said) if said else ""))
            if os.path.exists(self.endpoint):  # renamed into place once it listens
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the emulated ARM64 server did not listen within {START_TIMEOUT_S:g} s")

    def log_tail(self, n: int = 5) -> list[str]:
        try:
            text = (Path(self.folder) / LOG).read_text(errors="replace")
        except OSError:
            return []
        return [ln.strip() for ln in text.splitlines() if ln.strip()][-n:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        children = _children(self.proc.pid)
        stop_group(self.proc)  # the server and every child it forked
        _gone(children)
        shutil.rmtree(self.folder, ignore_errors=True)


def _children(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _gone(procs, timeout: float = 5.0) -> None:
    """Wait (a little) until killed processes that are not ours to reap are dead or zombies."""
    import psutil

    deadline = time.monotonic() + timeout
    for p in procs:
        while time.monotonic() < deadline:
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            time.sleep(0.02)


class Arm64Service(SharedProcesses):
    """``lease()`` gives the running emulated server (started on first use; there is one flavour) and
    ``release`` gives it back; a server a target left unwell is replaced for later targets, and a server
    that failed to start is not tried again (``SharedProcesses``)."""

    what = "ARM64 emulator"
    remember_failure = True  # the targets start emulators of their own

    sandbox: dict | None = None

    def start(self, flavour=None) -> _Emulator:
        return _Emulator(self.sandbox)
