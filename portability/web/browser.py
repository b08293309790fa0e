"""Headless Debian Chromium driven by Playwright: a fresh browser context on the check's shared browser
(``endpoint``: see ``web/service.py``), or a browser of its own in a fresh temporary profile.

One ``Browser`` per runtime instance (per worker); one page per configuration (the ORT wasm module
initialises once per page). Console lines are kept (bounded) for error messages and for facts the
runtimes print there (ORT's node placement); they never fail a target by themselves.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections import deque
from typing import Any, Callable

from portability.core.errors import RunError
from portability.web.paths import chromium_path

log = logging.getLogger(__name__)

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-dev-shm-usage",
]
WEBGPU_ARGS = ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-webgpu-adapter=swiftshader"]

#: Playwright navigation limit; evaluate() has none: a hung page is the worker timeout's job
GOTO_TIMEOUT_MS = 60_000
MAX_CONSOLE = 2000


class BrowserCrashed(RunError):
    pass


def short_tmp() -> str | None:
    """The temp folder, unless its path is too long for Chromium's socket path (108 bytes): then /tmp."""
    tmp = tempfile.gettempdir()
    if len(tmp) <= 48 or not os.access("/tmp", os.W_OK):
        return tmp
    return "/tmp"


class Browser:
    """``Browser(webgpu=...)`` launches on ``start()``; ``close()`` is idempotent and never raises."""

    def __init__(self, webgpu: bool = False, extra_args: list[str] | None = None,
                 console_filter: Callable[[str, str], bool] | None = None, endpoint: str | None = None):
        self.args = ARGS + (WEBGPU_ARGS if webgpu else []) + list(extra_args or [])
        self.endpoint = endpoint
        self._shared = None
        self.console_filter = console_filter
        self.console: deque[tuple[str, str]] = deque(maxlen=MAX_CONSOLE)
        self.crashed: str | None = None
        self._pw = self._ctx = self.page = None
        self._profile: str | None = None

    def start(self) -> "Browser":
        if self.endpoint:
            self._pw = _driver.acquire()
            self._shared = self._pw.chromium.connect_over_cdp(self.endpoint, timeout=GOTO_TIMEOUT_MS)
            self._ctx = self._shared.new_context()
            return self
        self._profile = tempfile.mkdtemp(prefix="portability-chromium-", dir=short_tmp())
        self._pw = _driver.acquire()
        self._ctx = self._pw.chromium.launch_persistent_context(
            self._profile, executable_path=chromium_path(), headless=True, args=self.args,
            env={**os.environ, "TMPDIR": self._profile},  # its singleton socket lives there: keep the path short
            handle_sigint=False, handle_sigterm=False, handle_sighup=False,
        )
        return self

    def pid(self) -> int | None:
        """The browser's main process id (for leak checks), when Playwright exposes it."""
        proc = getattr(getattr(self._ctx, "browser", None), "process", None)
        return getattr(proc, "pid", None)

    def new_page(self, url: str):
        """Close the current page, open ``url`` in a new one and return it."""
        if self.page is not None:
            self.page.close()
        self.console.clear()
        self.crashed = None
        page = self._ctx.new_page()
        page.on("console", self._on_console)
        page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))
        page.on("crash", lambda _p: setattr(self, "crashed", "the browser page crashed"))
        page.set_default_timeout(GOTO_TIMEOUT_MS)
        self.page = page
        page.goto(url, wait_until="load", timeout=GOTO_TIMEOUT_MS)
        return page

    def _on_console(self, msg) -> None:
        kind, text = msg.type, msg.text
        if self.console_filter is None or self.console_filter(kind, text):
            self.console.append((kind, text))

    def call(self, expression: str, arg: Any = None) -> Any:
        """``page.evaluate`` with a crash turned into BrowserCrashed (a run-error saying so)."""
        from playwright.sync_api import Error as PlaywrightError

        try:
            return self.page.evaluate(expression, arg)
        except PlaywrightError as e:
            msg = str(e)
            if self.crashed or "crash" in msg.lower() or "Target closed" in msg or "has been closed" in msg:
                raise BrowserCrashed(f"the browser crashed ({self.crashed or msg.splitlines()[0]})") from None
            raise

    def console_text(self, kinds: tuple[str, ...] = ("error", "warning", "pageerror")) -> list[str]:
        return [t for k, t in self.console if k in kinds]

    def close(self) -> None:
        for step in (self._close_ctx, self._stop_pw):
            try:
                step()
            except Exception as e:  # closing must never mask the real error
                log.debug("browser close: %s", e)
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None

    def _close_ctx(self) -> None:
        ctx, self._ctx, self.page = self._ctx, None, None
        if ctx is not None:
            ctx.close()
        shared, self._shared = self._shared, None
        if shared is not None:
            shared.close()  # over CDP: disconnects; the check's browser lives on

    def _stop_pw(self) -> None:
        pw, self._pw = self._pw, None
        if pw is not None:
            _driver.release()


class _Driver:
    """One Playwright driver per process (its sync API allows one per thread), shared by every Browser
    and stopped with the last one."""

    def __init__(self):
        self._pw = None
        self._users = 0

    def acquire(self):
        from playwright.sync_api import sync_playwright

        if self._pw is None:
            self._pw = sync_playwright().start()
        self._users += 1
        return self._pw

    def release(self) -> None:
        self._users -= 1
        if self._users <= 0 and self._pw is not None:
            pw, self._pw, self._users = self._pw, None, 0
            pw.stop()


_driver = _Driver()
