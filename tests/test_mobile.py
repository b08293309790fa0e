"""Mobile: onnx2tf -> LiteRT (fp32, fp16, dynamic int8, full int8) and ORT format, on real converters and
interpreters. One onnx2tf run per model, shared through the cache, keeps this file around a minute."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import FIXTURES, by_id, check_json
from mobile_models import castlike_model, conv_model, convert, reference

_MISSING = [m for m in ("onnx2tf", "tensorflow", "tf_keras", "ai_edge_litert") if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.mobile,
              pytest.mark.skipif(bool(_MISSING), reason=f"mobile stack not installed: {', '.join(_MISSING)}")]

# max_abs vs ONNX Runtime, per variant (int8: in quantization steps of the output)
BOUNDS = {"fp32": 1e-5, "fp16": 5e-3, "dynint8": 5e-2, "int8": 3.0}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("mobile")
    model = conv_model(d / "conv.onnx")
    rng = np.random.default_rng(1)
    cal = {"x": rng.random((16, 3, 5, 7), dtype=np.float32)}
    feeds = {"x": cal["x"][:1]}  # as in a check: calibrated on the inputs it runs (else int8 may clip them)
    return {"dir": d, "model": model, "cal": cal, "feeds": feeds, "ref": reference(model, feeds), "cache": d / "cache"}


def _tflite(work, quant):
    from portability.converters.onnx2tf import tflite_chain

    return convert(work["model"], tflite_chain(quant), work["cache"], work["cal"])


def _run(art, feeds, **options):
    from portability.runtimes.litert import LiteRt

    rt = LiteRt(options)
    rt.load(art)
    try:
        return rt.infer(feeds), rt.details(), rt.describe()
    finally:
        rt.close()


@pytest.mark.parametrize("quant", ["fp32", "fp16", "dynint8", "int8"])
def test_litert_variant_matches_onnx_runtime(work, quant):
    art = _tflite(work, quant)
    out, details, desc = _run(art, work["feeds"])
    ref = work["ref"]["y"]
    assert out["y"].shape == ref.shape == (1, 4, 5, 7)
    assert out["y"].dtype == np.float32
    err = float(np.max(np.abs(out["y"] - ref)))
    if quant == "int8":
        q = details["output_quant"]["y"]
        assert q["scale"] > 0 and details["input_quant"]["x"]["scale"] > 0
        err /= q["scale"]
        assert art.meta["calibration"].startswith("synthesized (16 samples") and art.meta["calibration_source"] == "synthesized"
    assert err <= BOUNDS[quant], f"{quant}: max_abs {err:.3g} > {BOUNDS[quant]}"
    assert "xnnpack" in desc and details["quant"] == quant


def test_nhwc_mapping_is_read_from_the_model(work):
    """The converter found NCHW->NHWC on the input and NHWC->NCHW on the output; the runtime applied it."""
    art = _tflite(work, "fp32")
    io = art.meta["tflite_io"]
    assert io["inputs"][0]["shape"] == [1, 5, 7, 3] and io["inputs"][0]["to_tflite"] == [0, 2, 3, 1]
    assert io["outputs"][0]["shape"] == [1, 5, 7, 4] and io["outputs"][0]["to_onnx"] == [0, 3, 1, 2]
    out, details, _ = _run(art, work["feeds"])
    assert details["layout"]["inputs"]["x"]["to_tflite"] == [0, 2, 3, 1]
    np.testing.assert_allclose(out["y"], work["ref"]["y"], atol=1e-5)
    # negative control: the same bytes reshaped instead of transposed give a clearly wrong answer,
    # so the comparison above would catch a wrong layout
    from portability.runtimes.litert import LiteRt

    rt = LiteRt()
    rt.load(art)
    raw = rt._run([work["feeds"]["x"].reshape(1, 5, 7, 3)])[0].transpose(0, 3, 1, 2)
    assert np.max(np.abs(raw - work["ref"]["y"])) > 1e-2


def test_reference_kernels_int8(work):
    out, details, desc = _run(_tflite(work, "int8"), work["feeds"], kernels="reference", threads=1)
    steps = np.max(np.abs(out["y"] - work["ref"]["y"])) / details["output_quant"]["y"]["scale"]
    assert steps <= BOUNDS["int8"] and "reference" in desc and details["threads"] == 1


def test_one_onnx2tf_run_serves_every_variant(work):
    arts = [_tflite(work, q) for q in ("fp32", "fp16", "dynint8", "int8")]
    assert len({a.sha256 for a in arts}) == 4
    saved = list((work["cache"] / "artifacts").rglob("saved_model.pb"))
    assert len(saved) == 1, saved  # the SavedModel step is cached once and shared


def test_ort_format_conversion_and_run(tmp_path):
    from portability.runtimes.ort_mobile import OrtMobile
    from portability.targets.mobile import ORT_CHAIN

    model = conv_model(tmp_path / "dyn.onnx", batch="N")
    art = convert(model, ORT_CHAIN, tmp_path / "cache")
    assert art.path.suffix == ".ort" and art.meta["shapes_fixed_for_usability_check"] == {"x": [1, 3, 5, 7]}
    feeds = {"x": np.random.default_rng(2).random((3, 3, 5, 7), dtype=np.float32)}  # dynamic batch kept
    rt = OrtMobile()
    rt.load(art)
    out = rt.infer(feeds)
    np.testing.assert_allclose(out["y"], reference(model, feeds)["y"], atol=1e-5)
    nnapi = rt.details()["mobile_usability"]["nnapi"]
    assert nnapi["coverage"] == 1.0 and nnapi["partitions"] == 1 and nnapi["verdict"] == "YES"


def test_unconvertible_model_is_a_convert_error(tmp_path):
    from portability.converters.onnx2tf import tflite_chain
    from portability.core.errors import ConvertError

    model = castlike_model(tmp_path / "castlike.onnx")
    with pytest.raises(ConvertError) as e:
        convert(model, tflite_chain("fp32"), tmp_path / "cache")
    assert e.value.op == "CastLike"
    assert "CastLike OP is not yet implemented" in str(e.value)


@pytest.mark.skipif(not (FIXTURES / "lenet.onnx").is_file(), reason="fixtures/lenet.onnx not built")
def test_check_lenet_on_mobile(tmp_path):
    ids = "mobile/tflite-fp32,mobile/tflite-fp16,mobile/tflite-int8,mobile/ort-mobile"
    report = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", ids)
    t = by_id(report)
    for i in ids.split(","):
        assert t[i]["status"] == "pass", (i, t[i]["error"], t[i].get("breaches"))
    out = lambda i: next(iter(t[i]["metrics"]["outputs"].values()))
    assert out("mobile/tflite-fp32")["max_abs"] < 1e-4
    assert out("mobile/tflite-int8")["max_abs_steps"] <= 4
