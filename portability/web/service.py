"""One headless Chromium per check (per flavour: plain, or with the software WebGPU adapter), shared by the
web targets' workers over the DevTools protocol.

The check's process launches it on the first web target and stops it at the end. Each worker connects,
opens a fresh browser context (its own storage, cache and service workers) and one page, and closes that
context when it is done: a page that crashes or hangs costs its target only. A browser that died, or
that a killed worker left with a hung page, is replaced for the targets after it (``restart``).
"""
from __future__ import annotations

from portability.core.shared import SharedProcesses
from portability.web.chromium import Chromium


class BrowserService(SharedProcesses):
    """``lease(webgpu)`` gives a running browser of that flavour (launched on first use) and ``release``
    gives it back; a browser a target left unwell is replaced for later targets (``SharedProcesses``)."""

    what = "Chromium"

    def start(self, webgpu: bool) -> Chromium:
        from portability.core.sandbox import Sandbox

        return KeepingChromium(bool(webgpu), sandbox=Sandbox.from_dict(getattr(self, "sandbox", None)).mode)

    def release_pages(self) -> int:
        """Close every idle kept page of the running browsers (``web.pool.release_idle``): how many."""
        from portability.web import pool

        with self._lock:
            browsers = [b for b in self._current.values() if b.alive()]
        return sum(pool.release_idle(b.endpoint) for b in browsers)


class KeepingChromium(Chromium):
    """A shared Chromium with the static server of the pages it keeps warm (``web/pool.py``), named in its
    endpoint; without the npm files, a plain one."""

    def __init__(self, webgpu: bool = False, sandbox: str = "auto"):
        super().__init__(webgpu, sandbox=sandbox)
        self.pages = None
        try:
            from portability.web import pool
            from portability.web.paths import HARNESS_DIR, modules_dir
            from portability.web.server import HarnessServer

            if modules_dir().is_dir():
                self.pages = HarnessServer(HARNESS_DIR, modules_dir(), module_dirs=pool.served_dirs()).start()
                self.endpoint = pool.advertise(self.endpoint, self.pages.base)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        try:
            if self.pages is not None:
                self.pages.close()
        finally:
            super().stop()
