"""One headless Chromium per check (per flavour: plain, or with the software WebGPU adapter), shared by the
web targets' workers over the DevTools protocol.

The check's process launches it on the first web target and stops it at the end. Each worker connects,
opens a fresh browser context (its own storage, cache and service workers) and one page, and closes that
context when it is done: a page that crashes or hangs costs its target only. A browser that died, or
that a killed worker left with a hung page, is replaced for the targets after it (``restart``).
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from portability.web.browser import ARGS, WEBGPU_ARGS, short_tmp
from portability.web.paths import chromium_path

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0


class _Chromium:
    def __init__(self, webgpu: bool):
        self.profile = tempfile.mkdtemp(prefix="portability-chromium-", dir=short_tmp())
        args = [chromium_path(), "--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={self.profile}", *ARGS, *(WEBGPU_ARGS if webgpu else []), "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env={**os.environ, "TMPDIR": self.profile}, start_new_session=True)
        self.endpoint = self._wait_endpoint()

    def _wait_endpoint(self) -> str:
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Chromium exited at start (code {self.proc.returncode})")
            try:
                port = port_file.read_text().split()[0]
                return f"http://127.0.0.1:{int(port)}"
            except (OSError, IndexError, ValueError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"Chromium did not open its DevTools port within {START_TIMEOUT_S:g} s")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the browser and every renderer / GPU process it started
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.profile, ignore_errors=True)


class BrowserService:
    """``lease(webgpu)`` gives a running browser of that flavour (launched on first use; thread-safe) and
    ``release`` gives it back. ``retire`` sends later targets to a fresh browser; a retired one is stopped
    once no target uses it. ``close()`` stops all."""

    def __init__(self):
        self._lock = threading.Lock()
        self._current: dict[bool, _Chromium] = {}
        self._users: dict[_Chromium, int] = {}
        self._retired: set[_Chromium] = set()
        self.launches = 0

    def lease(self, webgpu: bool) -> _Chromium:
        with self._lock:
            b = self._current.get(webgpu)
            if b is not None and not b.alive():
                self._retire(b)
                b = None
            if b is None:
                b = self._current[webgpu] = _Chromium(webgpu)
                self.launches += 1
                log.info("launched shared Chromium (%s) at %s", "webgpu" if webgpu else "plain", b.endpoint)
            self._users[b] = self._users.get(b, 0) + 1
            return b

    def release(self, b: _Chromium, unwell: bool = False) -> None:
        """Give a lease back; ``unwell``: its target hung, crashed or lost its page (retire the browser)."""
        with self._lock:
            self._users[b] = self._users.get(b, 1) - 1
            if unwell:
                self._retire(b)
            stop = b in self._retired and self._users[b] <= 0
        if stop:
            b.stop()

    def _retire(self, b: _Chromium) -> None:
        for k, v in list(self._current.items()):
            if v is b:
                del self._current[k]
        self._retired.add(b)
        if self._users.get(b, 0) <= 0:
            b.stop()

    def close(self) -> None:
        with self._lock:
            browsers = set(self._current.values()) | self._retired | set(self._users)
            self._current, self._retired, self._users = {}, set(), {}
        for b in browsers:
            b.stop()
