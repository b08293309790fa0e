"""Web: models really run in headless Chromium (onnxruntime-web, TF.js, LiteRT.js), compared with ONNX Runtime.

Every test launches the real Debian Chromium; after each one, no browser process and no HTTP server may
be left. About a minute and a half on 2 cores, most of it the one onnx2tf conversion.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from conftest import by_id, check_json


def _web_missing() -> str | None:
    from portability.runtimes.litert_js import LiteRtJs
    from portability.runtimes.ort_web import OrtWeb
    from portability.runtimes.tfjs import Tfjs

    a = next((a for a in (c.availability() for c in (OrtWeb, Tfjs, LiteRtJs)) if not a.ok), None)
    return None if a is None else f"{a.reason} (fix: {a.hint})"


_WHY = _web_missing()
_TF_MISSING = [m for m in ("onnx2tf", "tensorflow", "tensorflowjs", "ai_edge_litert") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.web
needs_browser = pytest.mark.skipif(_WHY is not None, reason=f"web stack missing: {_WHY}")
needs_tf = pytest.mark.skipif(bool(_TF_MISSING), reason=f"TF stack not installed: {', '.join(_TF_MISSING)}")


# -- tiny models, built here -----------------------------------------------------------------------
def _save(model, path: Path) -> Path:
    import onnx

    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def conv_net(path: Path, seed: int = 0) -> Path:
    """Conv -> Relu -> MaxPool -> Flatten -> MatMul -> Softmax on a 1x1x28x28 input (weights from ``seed``)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.normal(0, .3, (4, 1, 3, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(0, .1, (4,)).astype(np.float32), "B"),
             numpy_helper.from_array(rng.normal(0, .1, (4 * 13 * 13, 10)).astype(np.float32), "W2"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "W2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 28, 28])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def one_op(path: Path, op: str, shape: list[int]) -> Path:
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], op,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def big_matmul(path: Path, n_in: int = 2048, n_out: int = 4096) -> Path:
    """x[1, n_in] @ W[n_in, n_out]: 32 MiB of weights, too much to push through the driver protocol."""
    from onnx import TensorProto, helper, numpy_helper

    w = (np.random.default_rng(0).standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "big",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n_in])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n_out])],
                          [numpy_helper.from_array(w, "W")])
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def reference(model: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def artifact(path: Path):
    from portability.core.artifact import Artifact

    return Artifact(path=path, format="onnx", sha256="")


def run(runtime, art, feeds: dict[str, np.ndarray]):
    """Load, infer once, time a few runs, close — the worker's sequence."""
    try:
        runtime.load(art)
        out = runtime.infer(feeds)
        ms = runtime.time(feeds, warmup=2, runs=5)
        return out, ms
    finally:
        runtime.close()


# -- leak check after every test -------------------------------------------------------------------
def _browsers_and_servers(marker: str | None = None) -> tuple[list[str], list[str]]:
    import psutil

    me = psutil.Process()
    procs = me.children(recursive=True)
    if marker:  # processes of a CLI run are not our children once it returned: find them by their profile path
        procs += [p for p in psutil.process_iter() if p.pid != me.pid]
    left = []
    for p in procs:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "portability-chromium-" in cmd and (marker is None or marker in cmd):
            left.append(f"{p.pid} {cmd[:120]}")
        elif marker is None and ("chrom" in p.name().lower() or "playwright" in cmd):
            left.append(f"{p.pid} {cmd[:120]}")
    listening = [f"{c.laddr}" for c in me.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    return left, listening


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    import time

    for _ in range(20):  # Chromium's helper processes take a moment to exit
        left, listening = _browsers_and_servers()
        if not left and not listening:
            return
        time.sleep(0.25)
    assert not left, f"browser processes left behind: {left}"
    assert not listening, f"HTTP server still listening: {listening}"


# -- tests -----------------------------------------------------------------------------------------
@needs_browser
def test_ort_wasm_matches_onnx_runtime(tmp_path):
    from portability.runtimes.ort_web import OrtWeb

    model = conv_net(tmp_path / "m" / "model.onnx")
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32)
    rt = OrtWeb({"ep": "wasm", "threads": 1})
    out, ms = run(rt, artifact(model), {"x": x})
    assert out["y"].shape == (1, 10) and out["y"].dtype == np.float32
    assert float(np.max(np.abs(out["y"] - reference(model, {"x": x})["y"]))) < 1e-5
    assert len(ms) == 5 and all(m > 0 for m in ms)
    assert rt.backend_requested() == rt.backend_used() == "wasm"
    d = rt.details()
    assert d["bundle"] == "ort.wasm.min.mjs" and d["version"] == "1.30.0" and d["crossOriginIsolated"] is True
    assert d["node_placement"] == {"CPUExecutionProvider": 5}  # Conv+Relu fused: the EP that ran, read from ORT
    t = rt.load_timings()
    assert t["load"] > t["init"] > 0 and t["session"] > 0


@needs_browser
@needs_tf
@pytest.mark.parametrize("target", ["web/tfjs-wasm", "web/litert-js"])
def test_converted_model_matches_onnx_runtime(tmp_path_factory, target):
    from portability.engine.plan import plan
    from portability.targets import registry
    from portability.targets.base import load_class
    from mobile_models import convert

    cache = tmp_path_factory.getbasetemp() / "web-cache"  # one onnx2tf run for both targets
    model = conv_net(tmp_path_factory.getbasetemp() / "web-conv" / "model.onnx")
    t = registry()[target]
    art = convert(model, plan("onnx", t).steps, cache)
    x = np.random.default_rng(2).random((1, 1, 28, 28), dtype=np.float32)
    rt = load_class(t.runtime)(t.options)
    out, _ = run(rt, art, {"x": x})
    assert out["y"].shape == (1, 10)
    assert float(np.max(np.abs(out["y"] - reference(model, {"x": x})["y"]))) < 1e-5
    assert rt.backend_used() == rt.backend_requested() == "wasm"
    assert rt.details()["layout"]["x"]  # the NCHW -> NHWC mapping it applied is reported


@needs_browser
def test_op_missing_in_the_web_runtime_is_a_load_error_naming_it(tmp_path):
    from portability.core.errors import LoadError
    from portability.runtimes.ort_web import OrtWeb

    model = one_op(tmp_path / "erf" / "model.onnx", "Erf", [1, 8])  # ORT's WebGL backend has no Erf
    rt = OrtWeb({"ep": "webgl"})
    with pytest.raises(LoadError) as e:
        run(rt, artifact(model), {"x": np.zeros((1, 8), np.float32)})
    assert e.value.op == "Erf"
    assert "Erf" in str(e.value)


@needs_browser
def test_large_model_is_fetched_by_the_page(tmp_path):
    from portability.runtimes.ort_web import OrtWeb

    model = big_matmul(tmp_path / "big" / "model.onnx")
    x = np.random.default_rng(3).standard_normal((1, 2048), dtype=np.float32)
    rt = OrtWeb({"ep": "wasm"})
    out, _ = run(rt, artifact(model), {"x": x})
    assert rt.served_model_bytes == model.stat().st_size > 32 * 2**20  # over loopback HTTP, not the protocol
    assert float(np.max(np.abs(out["y"] - reference(model, {"x": x})["y"]))) < 1e-4


@needs_browser
def test_browser_crash_is_a_run_error_saying_so(tmp_path):
    from portability.core.errors import RunError
    from portability.runtimes.ort_web import OrtWeb
    from portability.web.browser import BrowserCrashed, PageError

    model = one_op(tmp_path / "relu" / "model.onnx", "Relu", [1, 4])
    rt = OrtWeb({"ep": "wasm"})
    try:
        rt.load(artifact(model))
        with pytest.raises((BrowserCrashed, PageError)):
            rt._browser.goto("chrome://crash", timeout_s=10)  # kills the renderer for real
        with pytest.raises(RunError, match="browser crashed"):
            rt.infer({"x": np.ones((1, 4), np.float32)})
    finally:
        rt.close()


@needs_browser
def test_browsers_on_a_shared_chromium_are_isolated_and_report_page_errors(tmp_path):
    """Over the DevTools protocol: a fresh context per Browser, console lines and page exceptions kept,
    a thrown error surfacing with its JS message, and closing that leaves the shared browser running."""
    from portability.web.browser import Browser, PageError
    from portability.web.server import HarnessServer
    from portability.web.service import BrowserService

    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "index.html").write_text("<script>console.warn('ready'); setTimeout(() => { throw new TypeError('late') })</script>")
    svc = BrowserService()
    try:
        endpoint = svc.lease(False).endpoint
        with HarnessServer(tmp_path / "h", tmp_path) as srv:
            a, b = Browser(endpoint=endpoint).start(), Browser(endpoint=endpoint, console_filter=lambda k, t: k != "warning").start()
            try:
                for br in (a, b):
                    br.new_page(srv.base + "h/index.html")
                a.call("v => localStorage.setItem('k', v)", "from a")
                assert b.call("() => localStorage.getItem('k')") is None  # separate browser contexts
                assert a.call("async x => ({y: x.n * 2, s: 'é'.repeat(3)})", {"n": 21}) == {"y": 42, "s": "ééé"}
                with pytest.raises(PageError, match="RangeError: too far"):
                    a.call("() => { throw new RangeError('too far') }")
                a.wait_for("() => document.readyState === 'complete'")
                a.call("() => new Promise((r) => setTimeout(r, 50))")
                assert ("warning", "ready") in a.console and ("pageerror", "TypeError: late") in a.console
                assert not [k for k, _ in b.console if k == "warning"]  # the filter dropped it
            finally:
                a.close()
                a.close()  # idempotent
                b.close()
        assert svc.lease(False).endpoint == endpoint  # the shared browser lives on
    finally:
        svc.close()


@needs_browser
def test_check_reports_pass_and_forced_fallback(tmp_path, request):
    """End to end through the CLI: ort-wasm passes; 2 threads without cross-origin isolation is `fallback`."""
    import shutil
    import tempfile

    model = conv_net(tmp_path / "m" / "model.onnx")
    scratch = Path(tempfile.mkdtemp(prefix="pw-web-", dir="/tmp"))  # where the worker's browser profile goes
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    env = {"PORTABILITY_PLUGINS": "doubles", "TMPDIR": str(scratch)}
    report = check_json(tmp_path, model, "--targets", "web/ort-wasm,test/web-fallback", "--runs", "5",
                        env=env, expect_rc=None)
    t = by_id(report)
    wasm, fb = t["web/ort-wasm"], t["test/web-fallback"]
    assert wasm["status"] == "pass", (wasm["error"], wasm["details"].get("log"))
    assert wasm["metrics"]["outputs"]["y"]["max_abs"] < 1e-5
    # a page the resident session kept: its engine started before (no init), its session maybe too
    page, lat = wasm["details"].get("page") or {}, set(wasm["metrics"]["latency_ms"])
    assert {"load", "p50"} <= lat
    assert ("init" in lat) != bool(page.get("engine_started_before"))
    assert ("session" in lat) != bool(page.get("session_reused"))
    assert fb["status"] == "fallback", fb
    left, _ = _browsers_and_servers(marker=str(scratch))
    assert not left, left
    assert not list(scratch.glob("portability-chromium-*")), "browser profile left behind"


def test_server_serves_only_its_files_with_isolation_headers(tmp_path):
    """No browser needed: the loopback server's routes, refusals and headers."""
    import urllib.error
    import urllib.request

    from portability.web.server import HarnessServer

    harness, modules, art = tmp_path / "h", tmp_path / "nm", tmp_path / "art"
    for f, body in ((harness / "index.html", "<html>"), (modules / "onnxruntime-web/dist/ort.wasm", "wasm"),
                    (modules / "onnxruntime-web/package.json", "{}"), (art / "model.onnx", "onnx"),
                    (tmp_path / "secret.txt", "no")):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(body)

    def get(url: str):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), b""

    with HarnessServer(harness, modules, module_dirs=("onnxruntime-web/dist",)) as srv:
        base = srv.serve_artifact(art).removesuffix("a/")
        assert base.startswith("http://127.0.0.1:")
        status, headers, body = get(base + "m/onnxruntime-web/dist/ort.wasm")
        assert (status, body, headers["Content-Type"]) == (200, b"wasm", "application/wasm")
        assert headers["Cross-Origin-Opener-Policy"] == "same-origin"
        assert headers["Cross-Origin-Embedder-Policy"] == "require-corp"
        assert headers["Cross-Origin-Resource-Policy"] == "same-origin"
        assert get(base + "a/model.onnx")[2] == b"onnx" and srv.served["a/model.onnx"] == 4
        for bad in ("m/onnxruntime-web/package.json", "a/../secret.txt", "a/%2e%2e/secret.txt", "h/../secret.txt", "x/y"):
            assert get(base + bad)[0] == 404, bad
        assert get(srv.origin + "/h/index.html")[0] == 404  # without the token
        url = srv.put_blob("in-0", b"abc")
        assert get(url)[2] == b"abc"
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)  # closed: nothing listens any more


@pytest.mark.parametrize("which", ["harness", "bundle"])
def test_the_servers_send_a_response_body_without_waiting_for_the_pages_ack(tmp_path, monkeypatch, which):
    """A response is two writes (its headers, its body): with Nagle's algorithm on, the body of every answer on
    a kept-alive connection waited for the page's delayed ACK (40 ms a blob, several per target)."""
    import socket
    import urllib.request
    from http.server import BaseHTTPRequestHandler

    from portability.bundle.serve import BundleServer
    from portability.web.server import HarnessServer

    nodelay: list[int] = []
    setup = BaseHTTPRequestHandler.setup

    def recording_setup(self):
        setup(self)
        nodelay.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    monkeypatch.setattr(BaseHTTPRequestHandler, "setup", recording_setup)
    (tmp_path / "index.html").write_text("<html>")
    if which == "harness":
        with HarnessServer(tmp_path, tmp_path) as srv:
            url = srv.put_blob("in-0", b"abc")
            assert urllib.request.urlopen(url, timeout=10).read() == b"abc"
    else:
        srv = BundleServer(tmp_path).start()
        try:
            assert urllib.request.urlopen(srv.url, timeout=10).read() == b"<html>"
        finally:
            srv.close()
    assert nodelay and all(nodelay), nodelay


def test_a_model_with_five_outputs_of_one_shape_gets_each_back_in_the_browser(tmp_path):
    """GPT-2 with its cache gives five outputs, four of one shape. The TF.js converter numbers a SavedModel's
    outputs (output_0...) in an order of its own and assigns those keys to the graph's nodes in yet another:
    read by key, two cache outputs came back swapped. Each output is now asked for by its graph node
    (``Identity_k``: the k-th of the SavedModel's outputs, sorted by key), and LiteRT.js's by signature key."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    names = ["logits", "present_key_0", "present_value_0", "present_key_1", "present_value_1"]
    inits = [numpy_helper.from_array(np.full((1,), k + 2, np.float32), f"c{k}") for k in range(5)]
    g = helper.make_graph([helper.make_node("Mul", ["x", f"c{k}"], [n]) for k, n in enumerate(names)], "five",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8]) for n in names], inits)
    model = tmp_path / "five.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(model))
    r = check_json(tmp_path, model, "--targets", "web/tfjs-cpu,web/litert-js,server/tf")
    for tid, t in by_id(r).items():
        if tid != r["reference"]:
            assert t["status"] == "pass", (tid, t.get("error"), t.get("breaches"))
            assert list(t["metrics"]["outputs"]) == names and all(
                o["max_abs"] == 0.0 for o in t["metrics"]["outputs"].values()), tid
