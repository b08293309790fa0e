"""Placement: how many of a model's nodes ran on the backend its target asked for (``details["placement"]``),
reported always, and a ``fallback`` under ``--strict-backend`` when not all did."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, by_id, check_json
from portability.runtimes.base import off_backend

pytestmark = pytest.mark.mobile

LENET = ROOT / "fixtures" / "lenet.onnx"


def _needs(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install tensorflow ai-edge-litert)")


@pytest.fixture(scope="module")
def topk_tflite(tmp_path_factory) -> Path:
    """A Dense layer (XNNPACK takes it) then a top-k (TOPK_V2: XNNPACK leaves it to the built-in kernels)."""
    _needs("tensorflow", "ai_edge_litert")
    import tensorflow as tf

    w = tf.constant(np.random.RandomState(0).randn(8, 4).astype(np.float32))
    fn = tf.function(lambda x: tf.math.top_k(tf.nn.relu(tf.matmul(x, w)), k=2).values,
                     input_signature=[tf.TensorSpec([1, 8], tf.float32)])
    path = tmp_path_factory.mktemp("topk") / "topk.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()]).convert())
    return path


def test_an_op_xnnpack_refuses_is_counted_and_named(tmp_path, topk_tflite):
    t = by_id(check_json(tmp_path, topk_tflite, "--targets", "mobile/tflite-fp32", "--runs", "2", "--no-history"))
    lite = t["mobile/tflite-fp32"]
    assert lite["status"] == "pass", lite
    p = lite["details"]["placement"]
    assert p["backend"] == "XNNPACK" and p["nodes"] == 2 and p["on_backend"] == 1 and p["share"] == 0.5, p
    assert p["elsewhere"] == {"TOPK_V2": 1}


def test_strict_backend_makes_a_partial_placement_a_fallback(tmp_path, topk_tflite):
    report = check_json(tmp_path, topk_tflite, "--targets", "mobile/tflite-fp32", "--runs", "2", "--no-history",
                        "--strict-backend", expect_rc=1)
    lite = by_id(report)["mobile/tflite-fp32"]
    assert lite["status"] == "fallback", lite
    assert any("1 of 2 nodes (TOPK_V2×1) ran outside XNNPACK" in b for b in lite["breaches"]), lite["breaches"]


def test_lenet_runs_wholly_on_the_cpu_provider_and_on_xnnpack(tmp_path):
    _needs("onnxruntime")
    targets = "server/ort-cpu" + (",mobile/tflite-fp32" if importlib.util.find_spec("ai_edge_litert") else "")
    t = by_id(check_json(tmp_path, LENET, "--targets", targets, "--runs", "2", "--no-history", "--strict-backend"))
    ort = t["server/ort-cpu"]
    assert ort["status"] == "pass", ort
    p = ort["details"]["placement"]
    assert p["backend"] == "CPUExecutionProvider" and p["share"] == 1.0 and p["on_backend"] == p["nodes"] > 0, p
    assert p["elsewhere"] == {}
    if "mobile/tflite-fp32" in t:
        assert t["mobile/tflite-fp32"]["details"]["placement"]["share"] == 1.0


def test_openvino_says_in_which_precision_its_layers_ran(tmp_path):
    _needs("openvino")
    t = by_id(check_json(tmp_path, LENET, "--targets", "server/openvino,server/openvino-default", "--runs", "2",
                         "--no-history"))
    f32, default = t["server/openvino"]["details"], t["server/openvino-default"]["details"]
    p = f32["placement"]
    # the convolutions, poolings and fully connected layers (not the plugin's reorders and constants), in f32
    assert p["backend"] == "CPU f32" and p["nodes"] == 7 and p["on_backend"] == 7, p
    want = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(default["inference_precision"],
                                                                       default["inference_precision"])
    assert default["placement"]["backend"] == f"CPU {want}" and default["placement"]["nodes"] == 7


def test_ort_profiles_the_first_inference_only_and_deletes_the_profile(tmp_path, monkeypatch):
    _needs("onnxruntime")
    from portability.core.artifact import Artifact
    from portability.runtimes.ort import OrtCpu

    monkeypatch.chdir(tmp_path)  # a worker's own folder
    rt = OrtCpu({})
    rt.load(Artifact(LENET, "onnx", ""))
    feeds = {"x": np.zeros((1, 1, 28, 28), np.float32)}
    rt.infer(feeds)
    assert len(list(tmp_path.glob("ort_profile_*.json"))) == 1
    rt.time(feeds, 1, 3)  # not profiled: the profile ended after the first inference
    assert rt.session.end_profiling() == ""
    placed = rt.details()["placement"]
    assert placed["on_backend"] == placed["nodes"] > 0 and not list(tmp_path.iterdir())
    rt.close()
    rt = OrtCpu({})
    rt.load(Artifact(LENET, "onnx", ""))
    rt.close()  # never ran: its profile is not left behind either
    assert not list(tmp_path.iterdir())


def test_the_breach_names_the_share_and_the_ops():
    placed = {"backend": "XNNPACK", "nodes": 31, "on_backend": 19, "share": 0.613, "elsewhere": {"TOPK_V2": 10, "CUMSUM": 2}}
    assert off_backend({"placement": placed}) == \
        "12 of 31 nodes (TOPK_V2×10, CUMSUM×2) ran outside XNNPACK (share 0.613 on it)"
    assert off_backend({"placement": dict(placed, on_backend=31, share=1.0, elsewhere={})}) is None
    assert off_backend({}) is None


def test_a_runtime_that_only_says_whether_it_was_fully_accelerated():
    assert off_backend({"placement": {"backend": "webgpu", "fully": True}}) is None
    text = off_backend({"placement": {"backend": "webgpu", "fully": False}})
    assert text and "outside webgpu" in text and "not fully accelerated" in text


@pytest.mark.web
def test_litert_js_says_whether_the_whole_model_ran_on_its_accelerator(tmp_path):
    from portability.runtimes.litert_js import LiteRtJs

    if not LiteRtJs.availability().ok:
        pytest.skip(f"LiteRT.js unavailable: {LiteRtJs.availability().reason}")
    t = by_id(check_json(tmp_path, LENET, "--targets", "web/litert-js", "--runs", "2", "--no-history"))["web/litert-js"]
    assert t["status"] == "pass" and t["details"]["placement"] == {"backend": "wasm", "fully": True}, t


@pytest.mark.parametrize("xnn,builtin,named", [("drift", "pass", "mobile/tflite-fp32 (xnnpack) drifts"),
                                               ("pass", "drift", "mobile/tflite-fp32-builtin (builtin) drifts"),
                                               ("pass", "pass", None)])
def test_the_litert_kernel_ab_names_the_side_that_drifts(xnn, builtin, named):
    from types import SimpleNamespace

    from portability.core.status import Status
    from portability.engine.verdict import delegate_ab
    from portability.targets import registry

    reg = registry()
    ids = ["mobile/tflite-fp32", "mobile/tflite-fp32-builtin", "mobile/tflite-fp16"]
    results = [SimpleNamespace(id=i, status=Status(s)) for i, s in zip(ids, (xnn, builtin, "drift"))]
    notes = delegate_ab(results, [reg[i] for i in ids])
    assert (len(notes) == 1 and notes[0].startswith(f"delegate A/B: {named}")) if named else notes == [], notes
