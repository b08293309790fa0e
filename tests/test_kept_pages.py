"""Kept pages (``web/pool.py``): a shared browser keeps each engine's page warm, and the last model it loaded,
for the next target of the same configuration; a page whose target failed is never kept; the pages' own
server serves the harness and the npm files only, and the worker's server answers that one origin alone."""
from __future__ import annotations

import http.client
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from conftest import by_id, check_json
from test_web import conv_net, needs_browser, reference

pytestmark = [pytest.mark.web, needs_browser]


@pytest.fixture
def browser():
    from portability.web.service import KeepingChromium

    c = KeepingChromium()
    yield c
    c.stop()


def _runtime(endpoint: str, **options):
    from portability.runtimes.ort_web import OrtWeb

    rt = OrtWeb({"ep": "wasm", **options})
    rt.services = {"browser": endpoint}
    return rt


def _webgpu_runtime(endpoint: str):
    """onnxruntime-web on WebGPU, driving the pages of the WebGPU browser at ``endpoint``."""
    rt = _runtime(endpoint, ep="webgpu")
    rt.services = {"browser-webgpu": endpoint}
    return rt


def _artifact(path: Path):
    from portability.core.artifact import Artifact, sha256_files

    return Artifact(path=path, format="onnx", sha256=sha256_files([path]))


def _once(rt, art, x):
    try:
        rt.load(art)
        out = rt.infer({"x": x})
        ms = rt.time({"x": x}, warmup=2, runs=3)
        return out, ms, rt.details(), rt.load_timings()
    finally:
        rt.close()


def test_a_kept_page_serves_the_next_target_and_keeps_its_session_for_the_same_model(tmp_path, browser):
    model = conv_net(tmp_path / "m" / "model.onnx")
    other = conv_net(tmp_path / "n" / "model.onnx", seed=7)
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32)
    want = reference(model, {"x": x})["y"]

    out1, _, d1, t1 = _once(_runtime(browser.endpoint), _artifact(model), x)
    assert d1["page"] == {"kept": True, "engine_started_before": False, "uses": 1, "session_reused": False}
    assert t1["init"] > 0 and t1["session"] > 0 and d1["model_fetched_bytes"] > 0
    # the same model again: the same page, its session kept; the inference runs again and agrees
    out2, ms2, d2, t2 = _once(_runtime(browser.endpoint), _artifact(model), x)
    assert d2["page"] == {"kept": True, "engine_started_before": True, "uses": 2, "session_reused": True}
    assert "init" not in t2 and "session" not in t2 and d2["model_fetched_bytes"] == 0
    assert float(np.max(np.abs(out2["y"] - want))) < 1e-5 and len(ms2) == 3
    assert d2["node_placement"] == d1["node_placement"]  # learnt when the session was made, kept with it
    # another model of the same configuration: the engine is warm, the session is new
    out3, _, d3, t3 = _once(_runtime(browser.endpoint), _artifact(other), x)
    assert d3["page"]["engine_started_before"] and not d3["page"]["session_reused"] and "init" not in t3
    assert float(np.max(np.abs(out3["y"] - reference(other, {"x": x})["y"]))) < 1e-5
    # another configuration: a page of its own
    _, _, d4, _ = _once(_runtime(browser.endpoint, threads=2), _artifact(model), x)
    assert d4["page"]["uses"] == 1 and not d4["page"]["engine_started_before"]


def test_a_parked_page_has_nothing_in_its_console_for_the_next_driver(tmp_path, browser):
    """What a kept page's console collected (ONNX Runtime's verbose session log) is dropped when it is parked:
    the next driver's attach does not have it all replayed."""
    from portability.web import pool
    from portability.web.browser import Browser

    model = conv_net(tmp_path / "m" / "model.onnx")
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32)
    _once(_runtime(browser.endpoint), _artifact(model), x)
    cdp, pages = pool.split(browser.endpoint)
    b = Browser(endpoint=cdp)
    b.start(context=False)
    try:
        (page,) = [t for t in b.command("Target.getTargets")["targetInfos"] if t["url"].startswith(pages + "h/index.html#")]
        heard: list[str] = []
        b._console = lambda kind, text: heard.append(text)  # every message the attach brings, filtered or not
        b.attach(page["targetId"])
        assert heard == []
        b.call("() => console.log('after the attach')")
        b.call("() => new Promise(r => setTimeout(r, 50))")
        assert heard == ["after the attach"]  # the console is heard: only its past is gone
        b.detach()
    finally:
        b.close()


def test_a_timing_in_chunks_warms_up_once_and_keeps_its_runs_per_sample(tmp_path, browser):
    """The worker times in chunks until the median is stable: the first re-warms the page after its wait, the
    later ones follow at once (no re-warm, no calibration) and take as many runs per sample as the first."""
    model = conv_net(tmp_path / "m" / "model.onnx")
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32)
    rt = _runtime(browser.endpoint)
    try:
        rt.load(_artifact(model))
        rt.pace_ms = 0.5
        rt.warm_up({"x": x}, 2)
        first = rt.time({"x": x}, 0, 10)
        one = rt.details()["timing"]
        later = rt.time({"x": x}, 0, 20)
        both = rt.details()["timing"]
    finally:
        rt.close()
    assert len(first) == 10 and len(later) == 20 and min(first + later) > 0
    assert one["warmup_runs"] >= 1 and both["warmup_runs"] == one["warmup_runs"]
    assert both["batch"] == one["batch"] and both["prewarm_runs"] == one["prewarm_runs"] >= 2


def test_a_model_the_device_cannot_run_leaves_the_kept_session_as_it_was(tmp_path):
    """A float16 model on a WebGPU adapter without float16 shaders is refused before any session is made: the
    kept page it claimed still holds the model it held (and that model's facts) for that model's next target."""
    from dataclasses import replace

    from portability.core.errors import Unavailable
    from portability.web.service import KeepingChromium

    model = conv_net(tmp_path / "m" / "model.onnx")
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32)
    c = KeepingChromium(webgpu=True)
    try:
        _, _, d1, _ = _once(_webgpu_runtime(c.endpoint), _artifact(model), x)
        assert d1["page"]["session_reused"] is False
        half = replace(_artifact(conv_net(tmp_path / "h" / "model.onnx", seed=3)), meta={"quantization": "float16 weights"})
        rt = _webgpu_runtime(c.endpoint)
        try:
            rt.load(half)
            pytest.skip("this WebGPU adapter has float16 shaders: the float16 model loads")
        except Unavailable as e:
            assert "shader-f16" in str(e)
        finally:
            rt.close()
        _, _, d3, t3 = _once(_webgpu_runtime(c.endpoint), _artifact(model), x)
        assert d3["page"] == {"kept": True, "engine_started_before": True, "uses": 3, "session_reused": True}
        assert "session" not in t3 and d3["node_placement"] == d1["node_placement"]
    finally:
        c.stop()


def test_the_models_of_one_check_keep_a_page_each_for_its_next_run(tmp_path, browser):
    """Two models of one check on one page configuration (a model and its quantized variant on one backend): the
    second opens a page of its own rather than take the first one's, so that the next run of the check finds
    each model's session (and a software GPU adapter's compiled shaders) where it left it. A model of another
    check takes an idle page of this one (the next model of an audit: its engine warm, its session new)."""
    model = conv_net(tmp_path / "m" / "model.onnx")
    variant = conv_net(tmp_path / "v" / "model.onnx", seed=3)
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32)

    def once(art, check):
        rt = _runtime(browser.endpoint)
        rt.check_id = check
        return _once(rt, _artifact(art), x)[2]["page"]

    assert once(model, "run-1") == {"kept": True, "engine_started_before": False, "uses": 1, "session_reused": False}
    assert once(variant, "run-1") == {"kept": True, "engine_started_before": False, "uses": 1, "session_reused": False}
    for art in (model, variant):  # the next run of the check: each model in its own page, its session kept
        assert once(art, "run-2") == {"kept": True, "engine_started_before": True, "uses": 2, "session_reused": True}
    other = conv_net(tmp_path / "o" / "model.onnx", seed=5)
    taken = once(other, "run-3")
    assert taken["engine_started_before"] and not taken["session_reused"] and taken["uses"] == 3


def test_two_targets_at_once_get_two_pages_and_a_failed_target_leaves_no_page(tmp_path, browser):
    from portability.core.errors import TargetError
    from portability.web import pool

    model = conv_net(tmp_path / "m" / "model.onnx")
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32)
    a, b = _runtime(browser.endpoint), _runtime(browser.endpoint)
    try:
        a.load(_artifact(model))
        b.load(_artifact(model))  # a holds its page: b gets a page of its own
        assert a._browser.target != b._browser.target
    finally:
        a.close()
        b.close()
    cdp, pages = pool.split(browser.endpoint)
    assert len(_kept(cdp, pages)) == 2
    # a model the engine cannot run: the target fails, and its page is closed, not kept
    bad = _unknown_op(tmp_path / "bad" / "model.onnx")
    rt = _runtime(browser.endpoint)
    with pytest.raises(TargetError):
        _once(rt, _artifact(bad), np.zeros((1, 4), np.float32))
    assert len(_kept(cdp, pages)) == 1, "the failed target's page was kept"


def test_more_targets_of_one_configuration_at_once_than_pages_kept_open_pages_of_their_own(tmp_path, browser, monkeypatch):
    """When every page of a configuration that may be kept is busy (``pool.MAX_PER_KEY``), the next target
    opens a page of its own, in a browser context of its own (it once asked for a page in no context:
    "Target.createTarget: Invalid parameters", a load-error of the tool's own making)."""
    from portability.web import pool

    monkeypatch.setattr(pool, "MAX_PER_KEY", 1)
    model = conv_net(tmp_path / "m" / "model.onnx")
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32)
    a, b = _runtime(browser.endpoint), _runtime(browser.endpoint)
    try:
        a.load(_artifact(model))
        b.load(_artifact(model))  # a holds the one page this configuration may keep
        assert b._kept is None and b._browser.target != a._browser.target
        out = b.infer({"x": x})
        assert float(np.max(np.abs(out["y"] - reference(model, {"x": x})["y"]))) < 1e-5
    finally:
        a.close()
        b.close()
    cdp, pages = pool.split(browser.endpoint)
    assert len(_kept(cdp, pages)) == 1  # the page of its own is closed with its context, not kept


def _unknown_op(path: Path) -> Path:
    """One node of an op no runtime has (its own domain): the session cannot be made."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Nowhere", ["x"], ["y"], domain="example.none")], "bad",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.none", 1)],
                          ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(path))
    return path


def _kept(cdp: str, pages: str) -> list[str]:
    from portability.web.browser import Browser

    b = Browser(endpoint=cdp).start(context=False)
    try:
        return [t["url"] for t in b.command("Target.getTargets")["targetInfos"]
                if t["type"] == "page" and t["url"].startswith(pages)]
    finally:
        b.close()


def test_the_pages_server_serves_every_engines_files_and_only_this_installs():
    from portability.runtimes.litert_js import LiteRtJs
    from portability.runtimes.ort_web import OrtWeb
    from portability.runtimes.tfjs import Tfjs
    from portability.web import pool

    for cls in (OrtWeb, Tfjs, LiteRtJs):
        assert set(cls.served_dirs()) <= set(pool.served_dirs()), cls
    endpoint = pool.advertise("http://127.0.0.1:9", "http://127.0.0.1:8/t/")
    assert pool.split(endpoint) == ("http://127.0.0.1:9", "http://127.0.0.1:8/t/")
    # a worker whose pages load another npm folder (a --versions environment's) opens a page of its own
    other = endpoint.replace(pool.modules_tag(), "0" * 12)
    assert pool.split(other) == ("http://127.0.0.1:9", None)


def test_the_pages_server_serves_no_model_and_the_workers_server_answers_one_origin(tmp_path, browser):
    from portability.web import pool
    from portability.web.paths import HARNESS_DIR, modules_dir
    from portability.web.server import HarnessServer

    _, pages = pool.split(browser.endpoint)
    u = urlsplit(pages)
    assert _status(u, "GET", u.path + "h/index.html") == 200
    assert _status(u, "GET", u.path + "a/model.onnx") == 404  # no artifact route: it reads no model
    assert _status(u, "GET", u.path + "m/onnxruntime-web/package.json") == 404  # npm dist folders only
    origin = f"{u.scheme}://{u.netloc}"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.onnx").write_bytes(b"x")
    with HarnessServer(HARNESS_DIR, modules_dir(), allow_origin=origin) as s:
        s.serve_artifact(tmp_path / "a")
        w = urlsplit(s.base)
        assert _status(w, "OPTIONS", w.path + "io/out", {"Origin": origin}) == 204
        assert _status(w, "OPTIONS", w.path + "io/out", {"Origin": "http://127.0.0.1:1"}) == 404
        conn = http.client.HTTPConnection(w.hostname, w.port, timeout=10)
        conn.request("GET", w.path + "a/m.onnx")
        r = conn.getresponse()
        assert r.status == 200 and r.getheader("Access-Control-Allow-Origin") == origin
        conn.close()


def _status(u, method: str, path: str, headers: dict | None = None) -> int:
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.mobile
def test_a_warm_check_reuses_the_resident_pages_and_still_compares(tmp_path):
    """Two checks of one model with the tests' resident session: the second's web targets run in the pages
    the first kept, on the sessions it made, and are compared and timed as ever."""
    model = conv_net(tmp_path / "m" / "model.onnx", seed=11)
    args = ("--targets", "web/ort-wasm,web/tfjs-wasm,web/litert-js", "--runs", "5")
    for run in ("1", "2"):
        (tmp_path / run).mkdir()
    check_json(tmp_path / "1", model, *args)
    second = by_id(check_json(tmp_path / "2", model, *args))
    for tid in ("web/ort-wasm", "web/tfjs-wasm", "web/litert-js"):
        t = second[tid]
        assert t["status"] == "pass" and t["details"]["page"]["session_reused"], (tid, t["details"].get("page"))
        assert t["metrics"]["outputs"]["y"]["max_abs"] < 1e-4 and t["metrics"]["latency_ms"]["p50"] > 0


def test_a_kept_webgpu_page_keeps_its_device_and_compiled_programs_for_the_next_model(tmp_path):
    """ONNX Runtime's WebGPU context (its device, and the programs it compiled) lives while one of its sessions
    does: the page keeps its warm session, so the next model of the same configuration runs on the device the
    first one compiled for (a new model of the same shapes compiles nothing again), and agrees as before."""
    from portability.web.service import KeepingChromium

    model = conv_net(tmp_path / "m" / "model.onnx")
    other = conv_net(tmp_path / "n" / "model.onnx", seed=7)
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32)
    c = KeepingChromium(webgpu=True)
    try:
        _, _, d1, _ = _once(_webgpu_runtime(c.endpoint), _artifact(model), x)
        out2, _, d2, _ = _once(_webgpu_runtime(c.endpoint), _artifact(other), x)
        fresh = KeepingChromium(webgpu=True)
        try:  # the other model on a page of a browser of its own: what a device that ran nothing before gives
            out3, _, d3, _ = _once(_webgpu_runtime(fresh.endpoint), _artifact(other), x)
        finally:
            fresh.stop()
    finally:
        c.stop()
    assert d1["device"]["sessions"] == 1 and d1["page"]["session_reused"] is False
    assert d2["page"]["engine_started_before"] and d2["page"]["session_reused"] is False
    assert d2["device"]["sessions"] == 2, "the second model ran on a device of its own"
    assert d3["device"]["sessions"] == 1
    np.testing.assert_array_equal(out2["y"], out3["y"])
