"""Quantization rescue: the per-layer report and the smallest float fallback, on a model whose int8 collapses
for a known reason (one activation channel a thousand times the others', the float model unchanged)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from quant_models import outlier_lenet

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "fixtures" / "digits.npz"
OUTLIER_CHANNEL = 3
#: the outlier's path through the first block: the layers whose quantized activations carry the channel
OUTLIER_LAYERS = {"node_conv2d", "node_relu", "node_max_pool2d", "node_conv2d_1"}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "portability", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900)


@pytest.fixture(scope="module")
def outlier(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("outlier")
    return outlier_lenet(d / "outlier.onnx", channel=OUTLIER_CHANNEL)


def _quantizable(model: Path, conv: str) -> list[str]:
    import onnx

    from portability.converters import onnx2tf, ort_quant

    return (getattr(ort_quant, conv, None) or getattr(onnx2tf, conv)).quantizable_nodes(onnx.load(str(model)).graph)


@pytest.mark.parametrize("target,conv", [("server/ort-qdq", "QdqInt8FromOnnx"), ("server/ort-int8", "DynInt8FromOnnx"),
                                         pytest.param("mobile/tflite-int8", "Int8TfliteFromSavedModel",
                                                      marks=[pytest.mark.slow, pytest.mark.mobile])])
def test_fix_finds_a_small_float_fallback(outlier, tmp_path, target, conv):
    out = tmp_path / "fix.json"
    r = _cli("fix", str(outlier), "--target", target, "--dataset", str(DIGITS), "--json", str(out), "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["status"] == "drift"  # collapsed as it is
    p = doc["passing"]
    assert p and p["float_nodes"], doc
    candidates = _quantizable(outlier, conv)
    assert len(p["float_nodes"]) <= len(candidates) // 2, (p["float_nodes"], candidates)
    assert set(p["float_nodes"]) <= set(candidates)
    assert p["size_bytes"]["before"] and p["size_bytes"]["after"] >= p["size_bytes"]["before"]
    assert p["p50_ms"]["before"] is not None and p["p50_ms"]["after"] is not None
    assert p["accuracy"]["after"] > p["accuracy"]["before"] + 0.3
    assert conv in p["option"] and "float_nodes" in p["python"]
    layers = doc["quantization"]["layers"]
    assert layers[0]["node"] in OUTLIER_LAYERS and OUTLIER_CHANNEL in layers[0]["outlier_channels"], layers[:3]
    # the set it reports passes when checked again by itself, as a user would apply it
    import portability

    rep = portability.check(outlier, targets=target, dataset=DIGITS, converter_options={conv: {"float_nodes": p["float_nodes"]}})
    assert next(t for t in rep.targets if t.id == target).status == "pass"


def test_the_report_ranks_the_outlier_layer_first_and_its_snr_is_onnx_runtimes(outlier, tmp_path):
    """quantize-report names the outlier channel's layer first, and its per-layer SNR agrees with ONNX Runtime's
    own qdq_loss_debug on the same QDQ model and inputs."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.qdq_loss_debug import (collect_activations, compute_activation_error,
                                                         create_activation_matching, modify_model_output_intermediate_tensors)

    with np.load(DIGITS) as z:
        x = z["x"]
    feeds, cal = x[:16], x[100:132]
    np.savez(tmp_path / "inputs.npz", x=feeds[:, None])  # a stack of 16 batches of one
    np.savez(tmp_path / "cal.npz", x=cal)
    out = tmp_path / "q.json"
    r = _cli("quantize-report", str(outlier), "--target", "server/ort-qdq", "--inputs", str(tmp_path / "inputs.npz"),
             "--calibration", str(tmp_path / "cal.npz"), "--json", str(out), "--quiet", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr  # the variant drifts, no search asked
    doc = json.loads(out.read_text())
    first = doc["layers"][0]
    assert set(first) >= {"node", "op_type", "snr_db", "sensitivity_db", "outlier_channels"}
    assert first["node"] in OUTLIER_LAYERS and first["outlier_channels"] == [OUTLIER_CHANNEL], doc["layers"][:3]
    assert first["others_share"] < 0.05 and first["node"] in r.stdout
    sens = [x["sensitivity_db"] for x in doc["layers"] if x["sensitivity_db"] is not None]
    assert sens == sorted(sens)
    far = [x for x in doc["layers"] if x["node"] == "node_linear_2"]  # away from the outlier's path
    assert far and far[0]["sensitivity_db"] > first["sensitivity_db"] + 10
    assert doc["calibration"]["source"] == "file" and Path(out.with_name("q.node_data.json")).is_file()

    class Rows(CalibrationDataReader):
        def __init__(self, rows):
            self.it = iter([{"x": row[None]} for row in rows])

        def get_next(self):
            return next(self.it, None)

    plain = tmp_path / "plain.onnx"
    m = onnx.load(str(outlier))
    del m.graph.value_info[:]
    onnx.save(m, str(plain))
    qdq = tmp_path / "qdq.onnx"
    quantize_static(plain, qdq, Rows(cal), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, extra_options={"CalibTensorRangeSymmetric": False, "ActivationSymmetric": False})
    aug_q, aug_f = tmp_path / "aug_q.onnx", tmp_path / "aug_f.onnx"
    modify_model_output_intermediate_tensors(qdq, aug_q)
    modify_model_output_intermediate_tensors(plain, aug_f)
    matched = create_activation_matching(collect_activations(str(aug_q), Rows(feeds)), collect_activations(str(aug_f), Rows(feeds)))
    errors = compute_activation_error(matched)
    compared = 0
    for layer in doc["layers"]:
        tensor = layer.get("compared") or layer["output"]  # a Conv's quantized output is read after its Relu
        if layer["snr_db"] is None or tensor not in errors or "xmodel_err" not in errors[tensor]:
            continue
        assert abs(layer["snr_db"] - float(errors[tensor]["xmodel_err"])) < 0.5, (layer, errors[tensor])
        compared += 1
    assert compared >= 8, (compared, list(errors))
    convs = [x for x in doc["layers"] if x["op_type"] == "Conv"]
    assert convs and all(x.get("compared", "").startswith("relu") for x in convs), convs


def test_fixture_lenet_has_nothing_to_rescue(tmp_path):
    import portability

    targets = "server/ort-qdq,server/ort-int8"
    plain = portability.check(ROOT / "fixtures" / "lenet.onnx", targets=targets, dataset=DIGITS)
    fixed = portability.check(ROOT / "fixtures" / "lenet.onnx", targets=targets, dataset=DIGITS, fix=True)
    assert {t.id: t.status for t in plain.targets} == {t.id: t.status for t in fixed.targets}
    assert all(t.status == "pass" for t in fixed.targets)
    assert not any((t.details or {}).get("fix") for t in fixed.targets)


def test_a_model_the_quantizer_refuses_is_preprocessed(tmp_path):
    """A Conv whose weight is a Constant node's output: ONNX Runtime's dynamic quantizer wants an initializer
    ("Expected 3.weight to be an initializer"); quant_pre_process folds it, and the report says so."""
    import onnx
    from onnx import helper, numpy_helper

    import portability

    m = onnx.load(str(ROOT / "fixtures" / "lenet.onnx"))
    w = next(t for t in m.graph.initializer if t.name == "3.weight")
    m.graph.initializer.remove(w)
    m.graph.node.insert(0, helper.make_node("Constant", [], ["3.weight"], name="weight_constant",
                                            value=numpy_helper.from_array(numpy_helper.to_array(w), "w")))
    path = tmp_path / "constant_weight.onnx"
    onnx.save(m, str(path))
    rep = portability.check(path, targets="server/ort-int8,server/ort-qdq")
    for tid in ("server/ort-int8", "server/ort-qdq"):
        t = next(x for x in rep.targets if x.id == tid)
        assert t.status == "pass", (tid, t.status, t.error)
    t = next(x for x in rep.targets if x.id == "server/ort-int8")
    said = json.dumps(t.to_dict())
    assert "quant_pre_process" in said and "Expected 3.weight to be an initializer" in said


def test_an_interrupted_report_keeps_what_it_measured(outlier, tmp_path, monkeypatch):
    """Ctrl-C in the middle of the sensitivity pass: the layers measured so far stay in the report, and the
    command writes them, said interrupted, before it exits 130."""
    from portability.cli import main as cli_main
    from portability.explain import probe, rescue
    from portability.settings.options import resolve

    def say(text: str) -> None:
        if "alone quantized (4/" in text:
            raise KeyboardInterrupt  # what the terminal's Ctrl-C raises in the main thread

    opts = resolve({}, {"targets": "server/ort-qdq"})
    doc: dict = {}
    with pytest.raises(KeyboardInterrupt), probe.opened(outlier, opts) as (info, session):
        rescue.report_of(outlier, "server/ort-qdq", opts, session, info, say, doc=doc)
    assert len(doc["layers"]) == 3 and doc["candidates"] == 12 and doc["checks"] == 5, doc

    def interrupted(*args, doc: dict, **kw):  # the command's side: a report stopped with 3 layers measured
        doc.update(target="server/ort-qdq", candidates=12, layers=[{"node": "node_conv2d"}] * 3)
        raise KeyboardInterrupt

    monkeypatch.setattr(rescue, "report_of", interrupted)
    out = tmp_path / "q.json"
    monkeypatch.setattr(sys, "argv", ["portability", "quantize-report", str(outlier), "-t", "server/ort-qdq", "--json", str(out)])
    with pytest.raises(SystemExit) as stop:
        cli_main.main()
    assert stop.value.code == 130
    written = json.loads(out.read_text())
    assert written["interrupted"] is True and len(written["layers"]) == 3
