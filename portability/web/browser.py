"""Headless Debian Chromium driven over the DevTools protocol (``web/cdp.py``): a fresh browser context
on the check's shared browser (``endpoint``: see ``web/service.py``), or on a browser of its own in a
fresh temporary profile.

One ``Browser`` per runtime instance (per worker); one page per configuration (the ORT wasm module
initialises once per page). Console lines are kept (bounded) for error messages and for facts the
runtimes print there (ORT's node placement); they never fail a target by themselves.
"""
from __future__ import annotations

import json
import logging
import math
from collections import deque
from typing import Any, Callable

from portability.core.errors import RunError
from portability.web.cdp import CDPError, Connection
from portability.web.chromium import ARGS, WEBGPU_ARGS, Chromium, short_tmp  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

#: navigation and ``wait_for`` limit; ``call`` has none: a hung page is the worker timeout's job
GOTO_TIMEOUT_S = 60.0
GOTO_TIMEOUT_MS = int(GOTO_TIMEOUT_S * 1000)
#: DevTools commands that only set things up answer within this
SETUP_TIMEOUT_S = 30.0
#: closing a page or a context waits at most this for the browser
CLOSE_TIMEOUT_S = 10.0
MAX_CONSOLE = 2000
CRASHED = "the browser page crashed"

#: polls ``pred`` in the page until it returns something truthy, or throws after ``ms``
_POLL = """async (pred, ms) => {
  const end = performance.now() + ms;
  while (!(await pred())) {
    if (performance.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${pred}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return true;
}"""
_UNSERIALIZABLE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf, "-0": -0.0}


class BrowserCrashed(RunError):
    pass


class PageError(Exception):
    """An exception thrown in the page (its JavaScript message), or a navigation that failed."""


class Browser:
    """``Browser(webgpu=...)`` connects (or launches) on ``start()``; ``close()`` is idempotent and never raises."""

    def __init__(self, webgpu: bool = False, extra_args: list[str] | None = None,
                 console_filter: Callable[[str, str], bool] | None = None, endpoint: str | None = None):
        self.webgpu = webgpu
        self.extra_args = list(extra_args or [])
        self.args = ARGS + (WEBGPU_ARGS if webgpu else []) + self.extra_args
        self.endpoint = endpoint
        self.console_filter = console_filter
        self.console: deque[tuple[str, str]] = deque(maxlen=MAX_CONSOLE)
        self.crashed: str | None = None
        self._chromium: Chromium | None = None
        self._conn: Connection | None = None
        self._context: str | None = None
        self._target: str | None = None
        self._session: str | None = None
        #: the documents (loader ids) of the current page that fired their load event
        self._loaded: set[str] = set()

    def start(self, context: bool = True) -> "Browser":
        """Connect (or launch); ``context``: open this Browser's own browser context for ``new_page``
        (without it, ``attach`` to a kept page: ``web/pool.py``)."""
        try:
            if not self.endpoint:
                self._chromium = Chromium(self.webgpu, self.extra_args)
            self._conn = Connection(self.endpoint or self._chromium.endpoint, on_event=self._on_event)
            if context:
                self.own_context()
        except BaseException:
            self.close()
            raise
        return self

    def own_context(self) -> None:
        """Open this Browser's own browser context (for ``new_page``): a Browser started without one, to
        drive kept pages, that finds none free opens a page of its own there."""
        # disposeOnDetach: a worker killed mid-page takes its context (and page) with it
        self._context = self._require().call("Target.createBrowserContext", {"disposeOnDetach": True},
                                             timeout=SETUP_TIMEOUT_S)["browserContextId"]

    def command(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A browser-level DevTools command (no page session)."""
        return self._require().call(method, params or {}, timeout=SETUP_TIMEOUT_S)

    def attach(self, target: str) -> "Browser":
        """Drive the existing page ``target`` (a kept one); what its console said before is not kept."""
        conn = self._require()
        self.console.clear()
        self.crashed = None
        self._loaded.clear()
        self._target = target
        self._session = conn.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                  timeout=SETUP_TIMEOUT_S)["sessionId"]
        ids = [conn.send(m, session=self._session) for m in ("Inspector.enable", "Runtime.enable", "Page.enable", "Log.enable")]
        ids.append(conn.send("Page.setLifecycleEventsEnabled", {"enabled": True}, session=self._session))
        for cid in ids:
            conn.wait(cid, SETUP_TIMEOUT_S, abort=self._check)
        self.console.clear()  # the replayed messages of its earlier drivers
        return self

    def forget_console(self) -> None:
        """Drop what the page's console and log collected: a later driver's ``attach`` would have them all
        replayed (a kept page's ONNX Runtime session logs verbosely: thousands of messages after some targets)."""
        conn = self._require()
        ids = [conn.send(m, session=self._session) for m in ("Runtime.discardConsoleEntries", "Log.clear")]
        for cid in ids:
            conn.wait(cid, SETUP_TIMEOUT_S, abort=self._check)

    def detach(self) -> None:
        """Leave the page as it is (kept for a later driver) and forget it."""
        target, session, self._target, self._session = self._target, self._session, None, None
        if session is not None and self._conn is not None and not self._conn.link.closed:
            try:
                self._conn.call("Target.detachFromTarget", {"sessionId": session}, timeout=CLOSE_TIMEOUT_S)
            except CDPError:
                pass  # already gone

    @property
    def target(self) -> str | None:
        """The page this Browser drives (its DevTools target id)."""
        return self._target

    def pid(self) -> int | None:
        """The browser's main process id when it is this Browser's own (for leak checks)."""
        return self._chromium.pid if self._chromium is not None else None

    def new_page(self, url: str, context: str | None = None) -> "Browser":
        """Close the current page, open ``url`` in a new one (waiting for its load event), in this Browser's
        context or in ``context``."""
        self._close_target()
        target = self._require().call("Target.createTarget", {"url": "about:blank", "browserContextId": context or self._context},
                                      timeout=SETUP_TIMEOUT_S)["targetId"]
        self.attach(target)
        self.goto(url)
        return self

    def goto(self, url: str, timeout_s: float = GOTO_TIMEOUT_S) -> None:
        """Navigate the page to ``url`` and wait for its load event."""
        try:
            res = self._command("Page.navigate", {"url": url}, timeout_s)
            if res.get("errorText"):
                raise PageError(f"navigating to {url}: {res['errorText']}")
            loader = res.get("loaderId")  # none: a same-document navigation, nothing to load
            if loader and loader not in self._loaded:
                self._conn.wait_event(lambda _m: loader in self._loaded, timeout_s, abort=self._check)
        except TimeoutError:
            raise PageError(f"navigating to {url}: no load event within {timeout_s:g} s") from None

    def wait_for(self, expression: str, timeout_s: float = GOTO_TIMEOUT_S) -> None:
        """Wait until the function ``expression`` returns something truthy in the page."""
        self.call(f"ms => ({_POLL})({expression}, ms)", timeout_s * 1e3)

    def call(self, expression: str, arg: Any = None) -> Any:
        """Call the function ``expression`` (e.g. ``"cfg => harness.setup(cfg)"``) in the page with ``arg``
        (JSON), await it and return its JSON value. A page exception is a PageError with its message; a
        page that crashes or goes away is BrowserCrashed."""
        source = f"({expression})({json.dumps(arg)})"
        res = self._command("Runtime.evaluate", {"expression": source, "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in res:
            raise PageError(_exception_text(res["exceptionDetails"]))
        return _value(res.get("result", {}))

    def _command(self, method: str, params: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """A command to the page's session, with a crash or a lost connection turned into BrowserCrashed."""
        self._check()
        conn = self._require()
        try:
            return conn.call(method, params, session=self._session, timeout=timeout_s, abort=self._check)
        except TimeoutError:
            raise
        except OSError as e:  # the DevTools connection closed: the browser went away
            self.crashed = self.crashed or f"the DevTools connection closed: {e}"
        except CDPError as e:
            if self.crashed is None and not _gone(str(e)):
                raise
            self.crashed = self.crashed or str(e)
        raise BrowserCrashed(f"the browser crashed ({self.crashed})")

    def _check(self) -> None:
        if self.crashed:
            raise BrowserCrashed(f"the browser crashed ({self.crashed})")

    def _require(self) -> Connection:
        if self._conn is None:
            raise BrowserCrashed("the browser crashed (not connected)")
        return self._conn

    # -- events --------------------------------------------------------------------------------------
    def _on_event(self, msg: dict[str, Any]) -> None:
        method, p, session = msg["method"], msg.get("params", {}), msg.get("sessionId")
        if session is not None and session != self._session:
            return  # a page closed before
        if method == "Runtime.consoleAPICalled":
            self._console(p.get("type", "log"), " ".join(_arg_text(a) for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.console.append(("pageerror", _exception_text(p.get("exceptionDetails", {}))))
        elif method == "Page.lifecycleEvent" and p.get("name") == "load":
            self._loaded.add(p.get("loaderId"))
        elif method == "Log.entryAdded":
            entry = p.get("entry", {})
            self._console(entry.get("level", "info"), entry.get("text", ""))
        elif method == "Inspector.targetCrashed" or (method == "Target.targetCrashed" and p.get("targetId") == self._target):
            self.crashed = CRASHED
        elif self._session and (method == "Inspector.detached" or (
                method == "Target.detachedFromTarget" and p.get("sessionId") == self._session)):
            self.crashed = self.crashed or f"the page went away ({p.get('reason', 'detached')})"

    def _console(self, kind: str, text: str) -> None:
        if self.console_filter is None or self.console_filter(kind, text):
            self.console.append((kind, text))

    def console_text(self, kinds: tuple[str, ...] = ("error", "warning", "pageerror")) -> list[str]:
        return [t for k, t in self.console if k in kinds]

    # -- closing -------------------------------------------------------------------------------------
    def close(self) -> None:
        for step in (self._dispose, self._disconnect, self._stop_chromium):
            try:
                step()
            except Exception as e:  # closing must never mask the real error
                log.debug("browser close: %s", e)

    def _close_target(self) -> None:
        target, self._target, self._session = self._target, None, None
        if target is not None and self._conn is not None and not self._conn.link.closed:
            try:
                self._conn.call("Target.closeTarget", {"targetId": target}, timeout=CLOSE_TIMEOUT_S)
            except CDPError:
                pass  # already gone

    def _dispose(self) -> None:
        context, self._context, self._target, self._session = self._context, None, None, None
        if context is not None and self._conn is not None and not self._conn.link.closed:
            self._conn.call("Target.disposeBrowserContext", {"browserContextId": context}, timeout=CLOSE_TIMEOUT_S)

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # the shared browser lives on

    def _stop_chromium(self) -> None:
        chromium, self._chromium = self._chromium, None
        if chromium is not None:
            chromium.stop()


def _gone(message: str) -> bool:
    """A command error that means the page or its session no longer exists."""
    m = message.lower()
    return any(s in m for s in ("target closed", "session with given id not found", "no session", "crash",
                                "inspected target navigated or closed", "target crashed"))


def _value(obj: dict[str, Any]) -> Any:
    if "value" in obj:
        return obj["value"]
    u = obj.get("unserializableValue")
    if u is None:
        return None  # undefined, or a value JSON cannot carry
    if u in _UNSERIALIZABLE:
        return _UNSERIALIZABLE[u]
    return int(u[:-1]) if u.endswith("n") else u  # a BigInt


def _arg_text(a: dict[str, Any]) -> str:
    """A console argument as the console prints it (roughly): strings as they are, the rest by value."""
    if "value" in a:
        v = a["value"]
        return v if isinstance(v, str) else json.dumps(v)
    return str(a.get("unserializableValue") or a.get("description") or a.get("type", ""))


def _exception_text(d: dict[str, Any]) -> str:
    """An exception's message (its description without the stack), else the protocol's text."""
    exc = d.get("exception") or {}
    desc = exc.get("description") or (str(exc["value"]) if "value" in exc else "")
    if desc:
        return desc.split("\n    at ")[0]
    return d.get("text") or "an exception in the page"
