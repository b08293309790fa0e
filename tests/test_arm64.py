"""ARM64: the same artifacts on aarch64 builds of LiteRT and ONNX Runtime under qemu-user emulation.

Needs the provisioned environment (``portability setup arm64``); skipped with the reason otherwise."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from portability.mobile import arm64
from mobile_models import conv_model, convert, reference

_HOME = arm64.home()  # the user's provisioned environment, found before conftest privatizes the cache dir
_OK, _WHY = arm64.status()
_MISSING = [m for m in ("onnx2tf", "tensorflow", "ai_edge_litert") if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.arm64,
              pytest.mark.skipif(not _OK, reason=f"{_WHY} (run: {arm64.SETUP_HINT})"),
              pytest.mark.skipif(bool(_MISSING), reason=f"mobile stack not installed: {', '.join(_MISSING)}")]


@pytest.fixture(autouse=True)
def _provisioned_env(monkeypatch):
    monkeypatch.setenv("PORTABILITY_ARM64_DIR", str(_HOME))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("arm64")
    model = conv_model(d / "conv.onnx")
    feeds = {"x": np.random.default_rng(3).random((1, 3, 5, 7), dtype=np.float32)}
    return {"model": model, "feeds": feeds, "ref": reference(model, feeds), "cache": d / "cache"}


def _run(runtime, art, feeds, **options):
    rt = runtime(options)
    rt.load(art)
    try:
        out = rt.infer(feeds)
        ms = rt.time(feeds, 1, 3)
        return out, rt.details(), rt.describe(), ms
    finally:
        rt.close()


def test_arm64_tflite_fp32(work):
    from portability.converters.onnx2tf import tflite_chain
    from portability.runtimes.arm64 import Arm64Tflite

    art = convert(work["model"], tflite_chain("fp32"), work["cache"])
    out, details, desc, ms = _run(Arm64Tflite, art, work["feeds"])
    np.testing.assert_allclose(out["y"], work["ref"]["y"], atol=1e-5)
    assert Arm64Tflite.emulated is True and details["machine"] == "aarch64"
    assert "aarch64" in desc and len(ms) == 3 and all(m > 0 for m in ms)


def test_arm64_tflite_int8_reference_kernels(work):
    from portability.converters.onnx2tf import tflite_chain
    from portability.runtimes.arm64 import Arm64Tflite

    cal = {"x": np.concatenate([work["feeds"]["x"], np.random.default_rng(1).random((7, 3, 5, 7), dtype=np.float32)])}
    art = convert(work["model"], tflite_chain("int8"), work["cache"], cal)
    out, details, _, _ = _run(Arm64Tflite, art, work["feeds"], kernels="reference")
    steps = np.max(np.abs(out["y"] - work["ref"]["y"])) / details["output_quant"]["y"]["scale"]
    assert steps <= 3


def test_arm64_ort(work):
    from portability.runtimes.arm64 import Arm64Ort
    from portability.targets.mobile import ORT_CHAIN

    art = convert(work["model"], ORT_CHAIN, work["cache"])
    out, details, desc, _ = _run(Arm64Ort, art, work["feeds"])
    np.testing.assert_allclose(out["y"], work["ref"]["y"], atol=1e-5)
    assert Arm64Ort.emulated is True and "onnxruntime" in desc and "mobile_usability" in details
