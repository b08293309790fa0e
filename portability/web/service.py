"""One headless Chromium per check (per flavour: plain, or with the software WebGPU adapter), shared by the
web targets' workers over the DevTools protocol.

The check's process launches it on the first web target and stops it at the end. Each worker connects,
opens a fresh browser context (its own storage, cache and service workers) and one page, and closes that
context when it is done: a page that crashes or hangs costs its target only. A browser that died, or
that a killed worker left with a hung page, is replaced for the targets after it (``restart``).
"""
from __future__ import annotations

import logging
import threading

from portability.web.chromium import Chromium

log = logging.getLogger(__name__)


class BrowserService:
    """``lease(webgpu)`` gives a running browser of that flavour (launched on first use; thread-safe) and
    ``release`` gives it back. ``retire`` sends later targets to a fresh browser; a retired one is stopped
    once no target uses it. ``close()`` stops all."""

    def __init__(self):
        self._lock = threading.Lock()
        self._current: dict[bool, Chromium] = {}
        self._users: dict[Chromium, int] = {}
        self._retired: set[Chromium] = set()
        self.launches = 0

    def lease(self, webgpu: bool) -> Chromium:
        with self._lock:
            b = self._current.get(webgpu)
            if b is not None and not b.alive():
                self._retire(b)
                b = None
            if b is None:
                b = self._current[webgpu] = Chromium(webgpu)
                self.launches += 1
                log.info("launched shared Chromium (%s) at %s", "webgpu" if webgpu else "plain", b.endpoint)
            self._users[b] = self._users.get(b, 0) + 1
            return b

    def release(self, b: Chromium, unwell: bool = False) -> None:
        """Give a lease back; ``unwell``: its target hung, crashed or lost its page (retire the browser)."""
        with self._lock:
            self._users[b] = self._users.get(b, 1) - 1
            if unwell:
                self._retire(b)
            stop = b in self._retired and self._users[b] <= 0
        if stop:
            b.stop()

    def _retire(self, b: Chromium) -> None:
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
