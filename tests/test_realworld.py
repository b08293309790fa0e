"""Models shaped like published ones (``fixtures/realworld/``): a 0-d input, int32 ids into a OneHot, a
recurrent state, an ``If``, dynamic spatial dims that need ``--shape``, an opset-9 Softmax.

Each runs through server, web and mobile targets, and the test asserts the honest status of each: what
the pinned converters and runtimes really do with it (a converter that cannot do one is a
``convert-error`` with its own message; a converter that silently changes the model is ``drift``). When
an upgrade of a pinned tool changes one of these, the test fails on purpose: look, then update it.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import FIXTURES, by_id, check_json, run_cli

RW = FIXTURES / "realworld"
FAST = ("--runs", "3", "--warmup", "1")


def _web_missing() -> str | None:
    from portability.runtimes.litert_js import LiteRtJs
    from portability.runtimes.ort_web import OrtWeb
    from portability.runtimes.tfjs import Tfjs

    a = next((a for a in (c.availability() for c in (OrtWeb, Tfjs, LiteRtJs)) if not a.ok), None)
    return None if a is None else f"{a.reason} (fix: {a.hint})"


_MISSING = [m for m in ("onnx2tf", "tensorflow", "tensorflowjs", "ai_edge_litert") if importlib.util.find_spec(m) is None]
_WEB = _web_missing()


def on_every_platform(test):
    """Marked web and mobile; skipped with the reason when either stack is missing."""
    for mark in (pytest.mark.web, pytest.mark.mobile,
                 pytest.mark.skipif(bool(_MISSING), reason=f"TF/LiteRT stack not installed: {', '.join(_MISSING)}"),
                 pytest.mark.skipif(_WEB is not None, reason=f"web stack missing: {_WEB}")):
        test = mark(test)
    return test


ALL = "server/ort-cpu-noopt,server/onnx-reference,web/ort-wasm,web/tfjs-cpu,web/litert-js,mobile/tflite-fp32,mobile/ort-mobile"


def statuses(report: dict) -> dict[str, str]:
    return {t["id"]: t["status"] for t in report["targets"]}


# --- the server alone: fast, no optional stack --------------------------------------------------------

@pytest.mark.parametrize("name", ["scalar_input", "onehot_int32", "recurrent_state", "if_branch", "softmax_opset9"])
def test_reference_and_server_targets_run_every_realworld_model(tmp_path, name):
    r = check_json(tmp_path, RW / f"{name}.onnx", "--targets", "server/ort-cpu-noopt", *FAST)
    assert statuses(r) == {"server/ort-cpu": "pass", "server/ort-cpu-noopt": "pass"}


def test_scalar_input_is_synthesized_fed_and_compared(tmp_path):
    r = check_json(tmp_path, RW / "scalar_input.onnx", "--targets", "server/ort-cpu-noopt,server/onnx-reference", *FAST)
    assert r["inputs"]["shapes"]["rate"] == []
    t = by_id(r)
    assert t["server/onnx-reference"]["status"] == "pass"
    assert t["server/ort-cpu-noopt"]["metrics"]["outputs"]["logits"]["max_abs"] == 0.0


def test_scalar_input_read_from_inputs_file(tmp_path):
    feeds = tmp_path / "feeds.npz"
    rate = np.array([3, 7], dtype=np.int64)  # two batches of the 0-d input
    np.savez(feeds, x=np.ones((2, 1, 16), np.float32), rate=rate)
    r = check_json(tmp_path, RW / "scalar_input.onnx", "--inputs", str(feeds), "--targets", "server/ort-cpu-noopt", *FAST)
    assert r["inputs"]["batches"] == 2 and statuses(r)["server/ort-cpu-noopt"] == "pass"
    import onnxruntime as ort

    s = ort.InferenceSession(str(RW / "scalar_input.onnx"))
    a, b = (s.run(None, {"x": np.ones((1, 16), np.float32), "rate": np.array(v)})[0] for v in rate)
    assert not np.allclose(a, b)  # the scalar really reaches the graph: different rates, different outputs


def test_opset9_softmax_reference_follows_the_old_axis_rule():
    """ONNX Runtime (the reference) normalizes over the flattened [1, 60]: checked against numpy."""
    import onnxruntime as ort

    x = np.random.default_rng(0).random((1, 2, 4, 5), dtype=np.float32)
    y = ort.InferenceSession(str(RW / "softmax_opset9.onnx")).run(None, {"x": x})[0]
    assert y.shape == (1, 3, 4, 5)
    assert np.isclose(y.sum(), 1.0, atol=1e-5)  # the opset-9 rule: one distribution over all 60 values


def test_reference_failure_is_named_in_the_summary(tmp_path):
    """A model ONNX Runtime cannot load: the summary says the reference did not run, not 'not available'."""
    import onnx
    from onnx import TensorProto as T, helper as h, numpy_helper

    g = h.make_graph([h.make_node("OneHot", ["ids", "depth", "v"], ["y"])], "g",
                     [h.make_tensor_value_info("ids", T.INT32, [1, 4])], [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8])],
                     [numpy_helper.from_array(np.array(8, np.int64), "depth"),
                      numpy_helper.from_array(np.array([0, 1], np.float32), "v")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")  # valid ONNX; ORT has no OneHot kernel for int32 ids with an int64 depth
    p = run_cli("check", str(tmp_path / "m.onnx"), "--targets", "server")
    assert p.returncode == 1, p.stderr
    assert "the reference server/ort-cpu did not run (load-error): nothing to compare with" in p.stderr
    assert "not available here" not in p.stderr


# --- usage errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (("check", str(FIXTURES / "mlp.onnx"), "--bogus"), "No such option: --bogus"),
    (("chek", str(FIXTURES / "mlp.onnx")), "Did you mean 'check'?"),
    (("check",), "Missing argument"),
    (("check", str(FIXTURES / "mlp.onnx"), "--runs", "many"), "Invalid value for '--runs'"),
])
def test_cli_usage_errors_exit_2_with_the_usage_line(args, says):
    p = run_cli(*args)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and "Usage:" in p.stderr and "internal error" not in p.stderr


# --- timing within a budget ----------------------------------------------------------------------------

def test_timing_plan_fits_the_budget():
    from portability.metrics.latency import timing_plan

    assert timing_plan(1.0, 10, 50, 20.0).runs == 50  # fast: untouched
    p = timing_plan(1000.0, 10, 50, 20.0)  # 1 s per inference, 20 s budget: 20 fit
    assert (p.warmup, p.runs, p.asked) == (4, 16, 50)
    assert timing_plan(7500.0, 10, 50, 2.0, min_runs=0).runs == 0  # too slow for a cross-check: not timed
    assert timing_plan(300.0, 10, 50, 2.0, min_runs=5).runs == 5  # what fits the budget, at least its minimum...
    assert timing_plan(500.0, 10, 50, 2.0, min_runs=5).runs == 4  # ...unless those overrun it: what fits, at least 3
    assert timing_plan(1000.0, 10, 50, 2.0, min_runs=5).runs == 3  # (a median and its spread)
    assert timing_plan(8000.0, 10, 50, 20.0, min_runs=5).runs == 3  # TF.js's JavaScript kernels on a detector
    assert timing_plan(1500.0, 10, 50, 2.0, min_runs=5).runs == 2  # ...and where 3 take over twice the budget, what fits that
    assert timing_plan(7500.0, 10, 50, 2.0, min_runs=5).runs == 1  # one run at least


def test_slow_reference_evaluator_is_timed_within_its_budget(tmp_path):
    """onnx.reference takes about a second per inference at 480x640: timed (``--time-emulated``: its speed is no
    device's), its timing stops at ~2 s."""
    r = check_json(tmp_path, RW / "dynamic_cnn.onnx", "--shape", "x=1x3x480x640", "--samples", "2",
                   "--targets", "server/onnx-reference", "--time-emulated")
    ref = by_id(r)["server/onnx-reference"]
    lat = ref["metrics"]["latency_ms"]
    assert lat["runs_asked"] == 50 and lat["runs"] <= 2 and lat["budget_s"] == 2.0
    timed_ms = lat["runs"] * lat["per_run_estimate_ms"]
    assert timed_ms <= 3 * 2000, lat
    assert any("timing budget" in n for n in ref["notes"])


# --- shapes reach the converters ---------------------------------------------------------------------

def test_static_model_cache_keys_ignore_shapes(tmp_path):
    """A model without dynamic dims converts exactly as before: the shapes do not enter its cache keys."""
    from portability.converters.base import ConvertContext
    from portability.converters.onnx2tf import SavedModelFromOnnx
    from portability.core.artifact import Artifact
    from portability.workers.cache import cache_key

    src = Artifact(path=FIXTURES / "lenet.onnx", format="onnx", sha256="abc")
    plain = cache_key(src, SavedModelFromOnnx(), {}, ConvertContext())
    assert cache_key(src, SavedModelFromOnnx(), {}, ConvertContext(input_shapes={})) == plain
    assert cache_key(src, SavedModelFromOnnx(), {}, ConvertContext(input_shapes={"x": [1, 3, 8, 8]})) != plain


@pytest.mark.mobile
@pytest.mark.skipif(bool(_MISSING), reason=f"TF/LiteRT stack not installed: {', '.join(_MISSING)}")
def test_onnx2tf_needs_the_static_shapes_of_the_dynamic_cnn(tmp_path):
    """Without the shapes onnx2tf fails inside the Resize; with them it converts (the check gives them)."""
    from portability.converters.base import ConvertContext
    from portability.converters.onnx2tf import SavedModelFromOnnx
    from portability.core.artifact import Artifact
    from portability.core.errors import ConvertError

    src = Artifact(path=RW / "dynamic_cnn.onnx", format="onnx", sha256="")
    (tmp_path / "a").mkdir()
    with pytest.raises(ConvertError, match="Resize"):
        SavedModelFromOnnx().convert(src, tmp_path / "a", {}, ConvertContext())
    (tmp_path / "b").mkdir()
    art = SavedModelFromOnnx().convert(src, tmp_path / "b", {}, ConvertContext(input_shapes={"x": [1, 3, 48, 64]}))
    assert art.meta["input_shapes"] == {"x": [1, 3, 48, 64]}
    assert art.meta["tflite_io"]["inputs"][0]["shape"] == [1, 48, 64, 3]


@on_every_platform
def test_shape_reaches_every_converter_and_the_record(tmp_path):
    r = check_json(tmp_path, RW / "dynamic_cnn.onnx", "--shape", "x=1x3x48x64", "--targets",
                   "server/tf,web/ort-wasm,web/tfjs-cpu,mobile/tflite-fp32,mobile/ort-mobile", *FAST)
    assert set(statuses(r).values()) == {"pass"}, statuses(r)
    for tid in ("server/tf", "web/tfjs-cpu", "mobile/tflite-fp32", "mobile/ort-mobile"):
        steps = by_id(r)[tid]["details"]["conversions"]
        assert any(s.get("input_shapes") == {"x": [1, 3, 48, 64]} for s in steps), (tid, steps)
    # the browser runs the ONNX file as it is (ORT-web takes dynamic dims): no shapes were imposed on it
    assert not any("input_shapes" in s for s in by_id(r)["web/ort-wasm"]["details"]["conversions"])


# --- every platform: the honest status of each ---------------------------------------------------------

EXPECTED = {
    # the 0-d int64 input runs everywhere except LiteRT.js: taken as int32 there (LiteRT.js has no int64
    # tensors), it is still a dynamic [-1] tensor in onnx2tf's file, and LiteRT.js cannot resize inputs
    "scalar_input": ({"web/litert-js": "load-error"}, {"web/litert-js": "dynamic shape [-1]"}),
    # TF.js runs the graph the TF.js converter wrote, and its MatMul gets the OneHot layout wrong
    "onehot_int32": ({"web/tfjs-cpu": "run-error"}, {"web/tfjs-cpu": "matMul"}),
    # onnx2tf cannot lower a GRU with an initial state, nor an If: every TF route is a convert-error
    "recurrent_state": ({t: "convert-error" for t in ("web/tfjs-cpu", "web/litert-js", "mobile/tflite-fp32")},
                        {"mobile/tflite-fp32": "GRU"}),
    "if_branch": ({t: "convert-error" for t in ("web/tfjs-cpu", "web/litert-js", "mobile/tflite-fp32")},
                  {"mobile/tflite-fp32": "If"}),
    # onnx2tf applies the opset-13 Softmax rule to an opset-9 model: a silently wrong model, caught as drift;
    # onnx.reference (a cross-check) has the same wrong kernel
    "softmax_opset9": ({t: "drift" for t in ("server/onnx-reference", "web/tfjs-cpu", "web/litert-js", "mobile/tflite-fp32")}, {}),
}


@on_every_platform
@pytest.mark.parametrize("name", list(EXPECTED))
def test_realworld_model_on_every_platform(tmp_path, name):
    failing, says = EXPECTED[name]
    r = check_json(tmp_path, RW / f"{name}.onnx", "--targets", ALL, *FAST, expect_rc=None)
    got = statuses(r)
    want = {t: failing.get(t, "pass") for t in ALL.split(",")}
    assert {t: got[t] for t in want} == want
    for tid, word in says.items():
        assert word in (by_id(r)[tid]["error"] or ""), by_id(r)[tid]["error"]
    gating_failed = any(t["gating"] and t["status"] not in ("pass", "skipped") for t in r["targets"])
    assert r["passed"] is not gating_failed
    assert not any("odd one out" in n for n in r["notes"])  # no pair of independent witnesses disagrees with ORT


def _arm64() -> tuple[str | None, str | None]:
    """(the provisioned emulator's folder, why it cannot run), read before conftest privatizes the cache."""
    from portability.mobile import arm64

    ok, why = arm64.status()
    return str(arm64.home()), (None if ok else f"{why} (run: {arm64.SETUP_HINT})")


_ARM64_HOME, _ARM64_WHY = _arm64()


@pytest.mark.arm64
@pytest.mark.skipif(_ARM64_WHY is not None, reason=str(_ARM64_WHY))
@pytest.mark.skipif(bool(_MISSING), reason=f"TF/LiteRT stack not installed: {', '.join(_MISSING)}")
def test_scalar_input_under_arm64_emulation(tmp_path):
    r = check_json(tmp_path, RW / "scalar_input.onnx", "--targets", "mobile/arm64-tflite,mobile/arm64-ort", *FAST,
                   env={"PORTABILITY_ARM64_DIR": _ARM64_HOME})
    assert statuses(r) == {"server/ort-cpu": "pass", "mobile/arm64-tflite": "pass", "mobile/arm64-ort": "pass"}
