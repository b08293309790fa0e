"""WebRuntime: the shared base of the in-browser runtimes (onnxruntime-web, TF.js, LiteRT.js).

One instance owns one loopback HTTP server and one headless Chromium with one page. The page fetches
the model itself from the server; feeds and outputs travel as single binary blobs over the same server
(GET / PUT), so the driver protocol only carries small JSON. Every duration is measured in the page.

Subclasses say which engine module the page loads (``engine``), which npm packages it needs, the
page configuration (``page_config``), how the ONNX-shaped feeds/outputs map to the artifact's
tensors (``to_page`` / ``from_page``), how the engine's error messages name ops (``op_error``), what the
page's ``info`` says when the backend asked for ran (``accepts``), and what a bundle's page of plain files
needs of the engine (``StaticPage``, ``runtimes/web_page.py``).
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import time as _time
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import urlsplit

import numpy as np

from portability.core.artifact import Artifact
from portability.core.errors import LoadError, RunError, TargetError, Unavailable
from portability.runtimes.base import Availability, Runtime
from portability.runtimes.web_page import StaticPage
from portability.web.blobs import groups, unpack
from portability.web.pool import MAX_KEPT_BYTES

log = logging.getLogger(__name__)

#: numpy dtype name <-> the harness's dtype names (io.mjs ARRAYS); bool travels as uint8 bytes
PAGE_DTYPES = {"float32", "float64", "float16", "int8", "int16", "int32", "int64",
               "uint8", "uint16", "uint32", "uint64", "bool"}

#: warm-up lasts at least this long (the JS glue is JIT-compiled over the first fast runs); it happens
#: before the target's turn to time, and the timing itself re-warms for REWARM_MS. A kept page whose engine
#: ran before (``web/pool.py``) has its glue compiled already: it warms up like a re-warm
MIN_WARMUP_MS = 250.0
REWARM_MS = 25.0
#: a latency sample spans at least this long (the page clock ticks in 5 µs steps): faster runs are
#: timed in batches and the sample is their mean
MIN_SAMPLE_MS = 1.0

#: feeds of many batches go to the page in blobs of at most this size
MAX_BLOB_BYTES = 32 * 2**20

#: the browser's full version (the user-agent string carries a reduced one)
_BROWSER_VERSION = """async () => {
  const d = navigator.userAgentData;
  const list = d && (await d.getHighEntropyValues(['fullVersionList'])).fullVersionList || [];
  const b = list.find((x) => /Chrom/.test(x.brand)) || {brand: 'Chromium', version: navigator.userAgent};
  return `${b.brand} ${b.version} (headless)`;
}"""

#: the harness's stage names, as the error messages say them
_STAGES = {"init": "runtime init", "session": "model load", "run": "inference", "time": "timing"}


class WebRuntime(StaticPage, Runtime):
    """A browser engine is one descriptor: ``engine`` (its page module, ``harness/<engine>.mjs``),
    ``packages`` (npm package -> a file that must exist in it) and ``served`` (the package folders the
    page may fetch; default: the folder of each required file)."""

    engine: ClassVar[str]
    #: the field of the page's ``info`` naming the backend that ran, in ``requested``'s words (``accepts``)
    backend_field: ClassVar[str | None] = None
    #: the option naming the backend asked for (default ``wasm``; ``webgpu`` needs the browser's WebGPU flavour)
    backend_option: ClassVar[str | None] = None
    OPTIONS: ClassVar[frozenset[str]] = frozenset({"isolated"})  # False: serve without cross-origin isolation
    packages: ClassVar[dict[str, str]] = {}
    served: ClassVar[tuple[str, ...]] = ()
    device = "cpu"
    network: ClassVar[str] = "browser"
    #: the browser driver (a web runtime adds its own engine's package)
    uses: ClassVar[tuple[str, ...]] = ("playwright",)
    providers: ClassVar[dict[str, tuple[str, Any]]] = {"browser": ("portability.web.service:BrowserService", False),
                                                       "browser-webgpu": ("portability.web.service:BrowserService", True)}

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__(options)
        self._server = None
        self._browser = None
        self._info: dict[str, Any] = {}
        self._load_ms: dict[str, float] = {}
        self._ids = itertools.count()
        self._browser_name = ""
        self._browser_endpoint: str | None = None
        self._time_info: dict[str, Any] = {}
        self._prewarm_runs: int | None = None
        self._prewarm_ms = 0.0  # what one warm-up run took
        #: the artifact's ONNX <-> page tensor mapping (engines that need one) and the ONNX output dtypes
        self._io: dict[str, Any] | None = None
        self._onnx_dtypes: dict[str, str] = {}
        self.served_model_bytes = 0
        #: the kept page this runtime drives (``web/pool.py``), and the facts of its session when it was reused
        self._kept = None
        self._reused: dict[str, Any] | None = None
        self._healthy = True
        self._holds = False  # the kept page's session is this target's model (its facts are parked with it)
        #: how the page was had: a kept one (``kept``, ``engine_started_before``, ``session_reused``, ``uses``)
        self._page: dict[str, Any] = {}

    # -- what subclasses provide ---------------------------------------------------------------------
    @classmethod
    def availability(cls) -> Availability:
        from portability.web.paths import web_availability

        return web_availability(cls.packages)

    @classmethod
    def service(cls, options: dict[str, Any]) -> str | None:
        return "browser-webgpu" if cls.uses_webgpu(options) else "browser"

    @classmethod
    def served_dirs(cls) -> tuple[str, ...]:
        return cls.served or tuple(dict.fromkeys(f"{pkg}/{f.rsplit('/', 1)[0]}" for pkg, f in cls.packages.items()))

    @classmethod
    def uses_webgpu(cls, options: dict[str, Any]) -> bool:
        return cls.backend_option is not None and options.get(cls.backend_option, "wasm") == "webgpu"

    @classmethod
    def requested(cls, options: dict[str, Any]) -> str | None:
        """The backend these options ask for (``backend_requested``): ``backend_option``'s value."""
        return options.get(cls.backend_option, "wasm") if cls.backend_option else None

    def backend_requested(self) -> str | None:
        return self.requested(self.options)

    @classmethod
    def _gpu(cls, options: dict[str, Any]) -> bool:
        return cls.uses_webgpu(options) or "webgl" in str(cls.requested(options) or "")

    @classmethod
    def cost(cls, options: dict[str, Any]) -> float:
        # a page, the engine's wasm compile; a software GPU adapter compiles its shaders on the CPU
        return 2.0 + (2.5 if cls.uses_webgpu(options) else 1.0 if cls._gpu(options) else 0.0)

    @classmethod
    def contends(cls, options: dict[str, Any]) -> str | None:
        return f"{cls.service(options)} GPU process" if cls._gpu(options) else None

    def page_config(self, artifact: Artifact) -> dict[str, Any]:
        """Engine-specific page configuration (merged into the ``harness.setup`` argument)."""
        return {}

    def backend_used(self) -> str | None:
        return self._info.get(self.backend_field) if self.backend_field else None

    @classmethod
    def accepts(cls, options: dict[str, Any]) -> dict[str, Any]:
        return {cls.backend_field: cls.requested(options)} if cls.backend_field else {}

    def to_page(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ONNX-named, ONNX-layout feeds -> the artifact's names, layout and dtypes."""
        return feeds

    def from_page(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The artifact's outputs -> ONNX names and layout."""
        return outputs

    def keep_console(self, kind: str, text: str) -> bool:
        """Which console lines to keep (for error messages and facts the engine prints there)."""
        return True

    def op_error(self, message: str, cls: type[TargetError]) -> TargetError:
        """A typed error from an engine message; subclasses find the op / node in it."""
        return cls(message)

    # -- the run -------------------------------------------------------------------------------------
    def load(self, artifact: Artifact) -> None:
        from portability.web import pool
        from portability.web.browser import Browser
        from portability.web.paths import HARNESS_DIR, modules_dir
        from portability.web.server import HarnessServer

        t0 = _time.perf_counter()
        endpoint = self._browser_endpoint = self.services.get(self.service(self.options))
        cdp, pages = pool.split(endpoint)
        isolated = self.options.get("isolated", True)
        if not (isolated and set(self.served_dirs()) <= set(pool.served_dirs())):
            pages = None  # a page of its own (one served without cross-origin isolation, an engine it lacks)
        try:
            self._server = HarnessServer(HARNESS_DIR, modules_dir(), isolated=isolated, module_dirs=self.served_dirs(),
                                         allow_origin=_origin(pages)).start()
            model_url = self._server.serve_artifact(artifact.folder) + artifact.path.name
            cfg = {"engine": self.engine, "modules": (pages or self._server.base) + "m/", "model": model_url,
                   **self.page_config(artifact)}
            self._browser = Browser(webgpu=self.uses_webgpu(self.options), console_filter=self.keep_console, endpoint=cdp)
            self._browser.start(context=not pages)
            if pages:
                self._kept = pool.claim(self._browser, pages, pool.key(self.engine, cfg), artifact.sha256, self.check_id)
                if self._kept is None:  # as many pages of this configuration kept as may be, all busy: a page
                    self._browser.own_context()  # of its own, served by its own server as without kept pages
                    cfg["modules"] = self._server.base + "m/"
            res = self._kept_setup(cfg, artifact.sha256) if self._kept else self._page_setup(cfg)
        except BaseException:
            self._healthy = False
            self.close()
            raise
        self._info = res.get("info") or {}
        self.served_model_bytes = sum(n for path, n in self._server.served.items() if path.startswith("a/"))
        if not res["ok"]:
            err = self.op_error(self._message(res), LoadError)
            # what this host lacks (an adapter without float16 shaders, a browser without WebNN) leaves the page
            # as it was: kept, so that the next target of its configuration learns it without a new page
            self._healthy = isinstance(err, Unavailable) and res.get("stage") in ("session", "init")
            self.close()
            raise err
        self._load_ms = {**res["timings"], "load": (_time.perf_counter() - t0) * 1e3}
        self._holds = True
        self.after_load()
        if self._reused is not None:
            self.restore(self._reused)

    def _page_setup(self, cfg: dict[str, Any]) -> dict[str, Any]:
        """A page of this target's own: the harness, the engine, the model."""
        self._browser.new_page(self._server.base + "h/index.html")
        self._browser.wait_for("() => window.harness !== undefined")
        self._browser_name = self._browser.call(_BROWSER_VERSION)
        return self._browser.call("cfg => harness.setup(cfg)", cfg)

    def _kept_setup(self, cfg: dict[str, Any], digest: str) -> dict[str, Any]:
        """A kept page (``web/pool.py``): its engine started unless it is already, its model loaded unless it
        holds this artifact's session already (then ``_reused``: the facts learnt when it was loaded)."""
        self._browser_name = self._browser.call(_BROWSER_VERSION)
        timings: dict[str, float] = {}
        res: dict[str, Any] = {"ok": True, "info": None}
        self._page = {"kept": True, "engine_started_before": self._kept.started, "uses": self._kept.state.get("uses")}
        if not self._kept.started:
            res = self._browser.call("cfg => harness.start(cfg)", cfg)
            timings.update(res.get("timings") or {})
        self._reused = self._kept.holds(digest) if res["ok"] else None
        if res["ok"] and self._reused is None:
            res = self._browser.call("s => harness.load(s)", {"model": cfg["model"], "digest": digest, "needs": cfg.get("needs") or {}})
            timings.update(res.get("timings") or {})
        self._page["session_reused"] = self._reused is not None
        if res["ok"] and not res.get("info"):
            res["info"] = self._browser.call("() => harness.state()")["info"]
        return {**res, "timings": timings}

    def restore(self, facts: dict[str, Any]) -> None:
        """What ``after_load`` learnt of this artifact in the page when its session was made (a kept page
        that holds it already: ``pool_facts``)."""

    def pool_facts(self) -> dict[str, Any]:
        """What a later target of the same artifact in this kept page cannot learn again (``restore``)."""
        return {}

    def after_load(self) -> None:
        """Check facts the page reported (backend, device, threads); raise Unavailable when the host lacks
        it. The base takes the device the page found (``cpu``, ``gpu``, ``software``)."""
        device = self._info.get("device")
        if device:
            self.device = device["device"]

    def load_timings(self) -> dict[str, float]:
        """``load`` (everything: server, browser, page, runtime, model), ``init`` (runtime init in the
        page) and ``session`` (model fetch + session / graph creation in the page), in ms."""
        return dict(self._load_ms)

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out_name = f"out-{next(self._ids)}"
        with self._feeds(feeds) as spec:
            res = self._call("s => harness.infer(s)", {"feeds": spec, "out": self._server.base + "io/" + out_name})
        self._info = res.get("info") or self._info
        return self.from_page(unpack(res["outputs"], self._server.take_blob(out_name)))

    def infer_all(self, batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """One page call per group of batches (a group's feeds travel as one blob, its outputs as another)."""
        out: list[dict[str, np.ndarray]] = []
        for group in groups(batches, MAX_BLOB_BYTES):
            out_name = f"out-{next(self._ids)}"
            with self._feeds(*group) as spec:
                res = self._call("s => harness.inferMany(s)", {"url": spec["url"], "batches": spec["batches"],
                                                              "out": self._server.base + "io/" + out_name})
            self._info = res.get("info") or self._info
            data = self._server.take_blob(out_name)
            out += [self.from_page(unpack(descs, data)) for descs in res["outputs"]]
        return out

    def warm_up(self, feeds: dict[str, np.ndarray], warmup: int) -> None:
        # the correctness batches ran in this page just before: where one took longer than the time-based warm-up
        # lasts, they warmed it up (the runs asked for still run)
        min_ms = 0.0 if self.pace_ms >= self._min_warmup_ms() else self._min_warmup_ms()
        with self._feeds(feeds) as spec:
            res = self._call("s => harness.warm(s)", {"feeds": spec, "warmup": int(warmup), "minWarmupMs": min_ms})
        self._prewarm_runs = int(res.get("runs") or 0)
        self._prewarm_ms = float(res.get("perRunMs") or self.pace_ms or 0.0)

    def _min_warmup_ms(self) -> float:
        return REWARM_MS if self._page.get("engine_started_before") else MIN_WARMUP_MS

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        warm = self._prewarm_runs is not None  # warmed up already: a brief re-warm — none where one run outlasts it
        rewarm = REWARM_MS if warm and self._prewarm_ms < REWARM_MS else 0.0 if warm else self._min_warmup_ms()
        batch = None
        if self._time_info:  # a later chunk of the same timing: the page ran the model a moment ago (no re-warm),
            warm, rewarm, batch = True, 0.0, self._time_info.get("batch")  # and its samples are as many runs each
        with self._feeds(feeds) as spec:
            res = self._call("s => harness.time(s)", {"feeds": spec, "warmup": 0 if warm else int(warmup), "runs": int(runs),
                                                      "minWarmupMs": rewarm, "rewarmed": warm, "minSampleMs": MIN_SAMPLE_MS,
                                                      "perRunMs": self._prewarm_ms or None, "batch": batch})
        info = dict(res.get("timing") or {})
        if self._time_info:  # the warm-up runs of every chunk of this timing
            info["warmup_runs"] = int(self._time_info.get("warmup_runs") or 0) + int(info.get("warmup_runs") or 0)
        if self._prewarm_runs is not None:
            info["prewarm_runs"] = self._prewarm_runs
        self._time_info = info
        return [float(x) for x in res["ms"]]

    def details(self) -> dict[str, Any]:
        keep = {k: v for k, v in self._info.items() if v is not None and k not in ("inputs", "outputs")}
        if self._browser_name:
            keep["browser"] = self._browser_name
        keep["model_fetched_bytes"] = self.served_model_bytes
        keep["shared_browser"] = bool(self._browser_endpoint)
        if self._page:
            keep["page"] = dict(self._page)
        if self._time_info:
            keep["timing"] = dict(self._time_info, clock="performance.now() in the page")
        return keep

    def close(self) -> None:
        browser, self._browser = self._browser, None
        server, self._server = self._server, None
        kept, self._kept = self._kept, None
        try:
            if kept is not None:
                # a model the page could not load left the session it held, and that session's facts
                kept.park(self.pool_facts() if self._holds else None,
                          keep=self._healthy and browser is not None and not browser.crashed
                          and self.served_model_bytes <= MAX_KEPT_BYTES)
            if browser is not None:
                browser.close()
        finally:
            if server is not None:
                server.close()

    # -- plumbing ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _feeds(self, *batches: dict[str, np.ndarray]) -> Iterator[dict[str, Any]]:
        """One or more batches of feeds, mapped for the page, as one blob on the server for the call's
        duration: ``tensors`` describes the first batch, ``batches`` every batch."""
        if self._server is None:
            raise RunError("the web runtime is not loaded")
        all_tensors, chunks, offset = [], [], 0
        for feeds in batches:
            tensors = []
            for name, a in self.to_page(feeds).items():
                a = np.ascontiguousarray(a)
                if a.dtype.name not in PAGE_DTYPES:
                    raise RunError(f"input '{name}': dtype {a.dtype} cannot be sent to the page")
                b = a.tobytes()
                tensors.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape), "offset": offset, "nbytes": len(b)})
                chunks.append(b)
                offset += len(b)
            all_tensors.append(tensors)
        name = f"in-{next(self._ids)}"
        url = self._server.put_blob(name, b"".join(chunks))
        try:
            yield {"url": url, "tensors": all_tensors[0], "batches": all_tensors}
        finally:
            self._server.take_blob(name)

    def _call(self, expression: str, arg: Any) -> dict[str, Any]:
        if self._browser is None:
            raise RunError("the web runtime is not loaded")
        try:
            res = self._browser.call(expression, arg)
        except BaseException:
            self._healthy = False
            raise
        if not res["ok"]:
            self._healthy = False
            raise self.op_error(self._message(res), RunError)
        return res

    def _message(self, res: dict[str, Any]) -> str:
        msg = " ".join(str(res.get("error") or "").split())
        if not msg:
            errors = self._browser.console_text() if self._browser else []
            msg = errors[-1] if errors else "unknown error in the page"
        return f"{_STAGES.get(res.get('stage'), 'in the page')}: {msg[:2000]}"


def _origin(base: str | None) -> str | None:
    """``http://host:port`` of a base URL."""
    if not base:
        return None
    u = urlsplit(base)
    return f"{u.scheme}://{u.netloc}"
