"""Pages kept warm between targets: a shared browser keeps each engine's page, started, for the next target
of the same page configuration — and the last model it loaded, for the next target of the same artifact.

The shared browser (``web/service.py``) comes with a static server of its own, the origin of its kept pages:
it serves the harness and the engines' npm files only, never a model. Its address travels in the browser's
endpoint (``ENDPOINT#pages=BASE``). A worker (``runtimes/web.py``) looks for an idle page of its configuration
among the browser's pages (their address says ``#k=KEY&d=DIGEST``: the configuration and the artifact loaded),
claims it in the page itself (one driver at a time: the claim is a single call in the page's own thread),
loads its model there from its own server (cross-origin, CORS to that one origin only) and parks the page
when its target is done. A page whose target failed, crashed or hung is closed, never kept; a browser whose
target hung is replaced as before (``SharedProcesses``).

What a reused page saves: the page, the engine's start (its wasm compile, its GPU device) and, for the same
artifact, the session (a software GPU adapter's shader compilation). What it does not: every inference,
comparison and timed run of the target happens again, in that page.
"""
from __future__ import annotations

import hashlib
import json
import logging
import secrets
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

MARK = "#pages="
#: pages of one configuration the browser keeps (idle or busy); past it a target opens a page of its own
MAX_PER_KEY = 4
#: pages the browser keeps in all; past it an idle page of another configuration is closed for a new one
MAX_PAGES = 16
#: a model larger than this is not kept loaded (a wasm heap never shrinks): its page is closed after it
MAX_KEPT_BYTES = 64 << 20
#: a page is closed after this many targets (whatever its engine keeps between sessions stays bounded)
MAX_USES = 200


def split(endpoint: str | None) -> tuple[str | None, str | None]:
    """A shared browser's endpoint -> (its DevTools address, the base URL of its kept pages' server), the
    latter None where there is none or where it serves other npm files than this process would load (a
    ``--versions`` environment's engine: that worker opens a page of its own)."""
    if not endpoint or MARK not in endpoint:
        return endpoint, None
    cdp, _, rest = endpoint.partition(MARK)
    pages, _, tag = rest.partition("&modules=")
    return cdp, pages if tag == modules_tag() else None


def advertise(endpoint: str, pages_base: str) -> str:
    """The endpoint that names the kept pages' server (and which npm files it serves)."""
    return f"{endpoint}{MARK}{pages_base}&modules={modules_tag()}"


def modules_tag() -> str:
    """Which npm folder this process's pages load (a digest of its path)."""
    from portability.web.paths import modules_dir

    return hashlib.sha256(str(modules_dir().resolve()).encode()).hexdigest()[:12]


def served_dirs() -> tuple[str, ...]:
    """The npm folders the kept pages' server serves: every registered browser engine's own
    (``WebRuntime.served_dirs``, gathered by ``web.paths.engine_dirs``)."""
    from portability.web.paths import engine_dirs

    return engine_dirs()


def key(engine: str, cfg: dict[str, Any]) -> str:
    """The page configuration (what the engine's start depends on, not the model nor any one server)."""
    same = {k: v for k, v in cfg.items() if k not in ("model", "modules", "warmModel", "needs")}
    return hashlib.sha256(json.dumps({"engine": engine, **same}, sort_keys=True).encode()).hexdigest()[:16]


def _fields(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).fragment).items()}


class KeptPage:
    """This worker's claim on a kept page: ``state`` is what the page said at the claim (``started``: its
    engine is up; ``current``: ``{digest, facts}`` of the model it holds; ``uses``)."""

    def __init__(self, browser, target: str, context: str, state: dict[str, Any], check: str = ""):
        self.browser, self.target, self.context, self.state, self.check = browser, target, context, state, check

    @property
    def started(self) -> bool:
        return bool(self.state.get("started"))

    def holds(self, digest: str) -> dict[str, Any] | None:
        """The facts of the session the page holds, when it is of this artifact (else None)."""
        cur = self.state.get("current") or {}
        return (cur.get("facts") or {}) if cur.get("digest") == digest else None

    def park(self, facts: dict[str, Any] | None, keep: bool) -> None:
        """Give the page back (``keep``) with the facts of its model, or close it."""
        if keep and int(self.state.get("uses") or 0) < MAX_USES:
            try:
                self.browser.call("a => harness.park(a.facts, a.check)", {"facts": facts, "check": self.check})
                self.browser.forget_console()
                self.browser.detach()
                return
            except Exception as e:  # a page that cannot be parked is not kept
                log.debug("parking a page: %s", e)
        self.discard()

    def discard(self) -> None:
        try:
            self.browser.detach()
            self.browser.command("Target.disposeBrowserContext", {"browserContextId": self.context})
        except Exception as e:  # gone already
            log.debug("closing a kept page: %s", e)


def claim(browser, pages: str, page_key: str, digest: str, check: str = "") -> KeptPage | None:
    """An idle kept page of this configuration: the one holding this artifact, else one holding none, else one
    holding another check's model (lost to this one: the next model of an audit); else a new one while the
    browser keeps fewer than MAX_PER_KEY of it, so that the models of one check on one configuration (a model and
    its quantized variants on one backend) each keep their page, session and compiled shaders for the next run of
    that check; else one holding another model of this check. None when none is idle (the target then opens a
    page of its own)."""
    token = secrets.token_urlsafe(9)
    index = pages + "h/index.html"
    kept = _kept(browser, pages)
    mine = [t for t in kept if _fields(t["url"]).get("k") == page_key]

    def rank(t) -> int:
        f = _fields(t["url"])
        return 0 if f.get("d") == digest else 1 if "d" not in f else 3 if check and f.get("c") == check else 2

    full = len(mine) >= MAX_PER_KEY  # no new page may be opened: another model of this check is lost too
    for t in sorted((t for t in mine if full or rank(t) < 3), key=rank):
        page = _try(browser, t, token, check)
        if page is not None:
            return page
    if full:
        return None
    if len(kept) >= MAX_PAGES:
        _evict(browser, [t for t in kept if t not in mine])
    context = browser.command("Target.createBrowserContext", {})["browserContextId"]
    try:
        browser.new_page(f"{index}#k={page_key}&owner={token}", context=context)
        browser.wait_for("() => window.harness !== undefined")
        state = browser.call("t => harness.claim(t)", token)
    except BaseException:
        browser.detach()
        browser.command("Target.disposeBrowserContext", {"browserContextId": context})
        raise
    return KeptPage(browser, browser.target, context, state, check)


def _kept(browser, pages: str) -> list[dict[str, Any]]:
    """The browser's kept pages (those of the harness its pages' server at ``pages`` serves), idle or not."""
    index = pages + "h/index.html#"
    return [t for t in browser.command("Target.getTargets")["targetInfos"]
            if t.get("type") == "page" and t.get("url", "").startswith(index)]


def _try(browser, info: dict[str, Any], token: str, check: str = "") -> KeptPage | None:
    """Claim this page if it is idle (and still there)."""
    try:
        browser.attach(info["targetId"])
        state = browser.call("t => window.harness ? harness.claim(t) : {ok: false}", token)
    except Exception as e:  # closed meanwhile, or busy loading
        log.debug("claiming %s: %s", info.get("targetId"), e)
        state = {"ok": False}
    if state.get("ok"):
        return KeptPage(browser, info["targetId"], info.get("browserContextId"), state, check)
    browser.detach()
    return None


def release_idle(endpoint: str) -> int:
    """Close every idle kept page of the browser at ``endpoint`` (a resident session that has been idle a while
    lets its pages go: ``resident/server.py``); a page a worker holds is not idle and stays. How many closed."""
    from portability.web.browser import Browser

    cdp, pages = split(endpoint)
    if not pages:
        return 0
    browser = Browser(endpoint=cdp).start(context=False)
    try:
        token, closed = secrets.token_urlsafe(9), 0
        for t in _kept(browser, pages):
            page = _try(browser, t, token)
            if page is not None:
                page.discard()
                closed += 1
        return closed
    finally:
        browser.close()


def _evict(browser, others: list[dict[str, Any]]) -> None:
    """Close one idle page of another configuration (the first that can be claimed)."""
    token = secrets.token_urlsafe(9)
    for t in others:
        page = _try(browser, t, token)
        if page is not None:
            page.discard()
            return
