"""Sources other than ONNX: each is read with its signature and checked against its own runtime, and
untrusted files are refused with one line (exit 2, no traceback) before any framework runs them."""
from __future__ import annotations

import importlib.util
import pickle
import shutil

import pytest

from conftest import FIXTURES, by_id, check_json, run_cli


def _need(*mods):
    missing = [m for m in mods if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


def refused(path, *more: str, args=("--targets", "server")) -> str:
    p = run_cli("check", str(path), *args)
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert p.returncode == 2, f"rc={p.returncode}\n{p.stderr}"
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for m in more:
        assert m in lines[0], lines[0]
    return lines[0]


def test_a_keras_lambda_layer_is_refused(tmp_path):
    _need("keras", "tensorflow")
    import keras

    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Lambda(lambda x: x * 2)])
    model.save(tmp_path / "lambda.keras")
    refused(tmp_path / "lambda.keras", "Lambda", "refused")


def test_a_truncated_keras_file_is_refused(tmp_path):
    raw = (FIXTURES / "keras_cnn.keras").read_bytes()
    (tmp_path / "cut.keras").write_bytes(raw[: len(raw) // 2])
    refused(tmp_path / "cut.keras", "cut.keras", "truncated")


@pytest.mark.parametrize("name", ["model.pkl", "model.onnx", "weights.bin"])
def test_a_pickle_is_refused_whatever_its_name(tmp_path, name):
    (tmp_path / name).write_bytes(pickle.dumps({"weights": [1, 2, 3]}, protocol=4))
    refused(tmp_path / name, "pickle", "refused")


def test_a_torch_checkpoint_is_refused_with_what_to_export(tmp_path):
    _need("torch")
    import torch

    torch.save({"w": torch.zeros(2)}, tmp_path / "model.pt")
    shutil.copyfile(tmp_path / "model.pt", tmp_path / "model.onnx")
    for f in ("model.pt", "model.onnx"):
        refused(tmp_path / f, "torch.export.save")


def test_a_savedmodel_with_missing_variables_is_refused(tmp_path):
    _need("tensorflow")
    sm = tmp_path / "sm"
    shutil.copytree(FIXTURES / "keras_cnn_savedmodel", sm)
    for f in (sm / "variables").glob("variables.data-*"):
        f.unlink()
    refused(sm, "variables")


def test_a_tfjs_shard_outside_its_folder_is_refused(tmp_path):
    import json

    d = tmp_path / "m"
    shutil.copytree(FIXTURES / "keras_cnn_tfjs", d)
    doc = json.loads((d / "model.json").read_text())
    doc["weightsManifest"][0]["paths"] = ["../../etc/passwd"]
    (d / "model.json").write_text(json.dumps(doc))
    refused(d / "model.json", "leaves the model's folder")


def test_keras_check_names_format_framework_reference_and_routes(tmp_path):
    _need("keras", "tensorflow", "tf2onnx")
    r = check_json(tmp_path, FIXTURES / "keras_cnn.keras", "--targets", "server/ort-cpu,server/tf",
                   "--dataset", str(FIXTURES / "digits_nhwc.npz"), "--samples", "50", "--runs", "3")
    assert r["model"]["format"] == "keras" and r["model"]["framework"].startswith("keras 3")
    assert r["reference"] == "server/keras" and r["model"]["inputs"][0]["shape"] == [None, 28, 28, 1]
    t = by_id(r)
    assert [x["status"] for x in r["targets"]] == ["pass"] * 3
    assert t["server/keras"]["metrics"]["accuracy"] > 0.85
    assert t["server/tf"]["details"]["plan"] == {"route": ["keras", "saved_model"], "via": None,
                                                "steps": ["KerasFromKeras", "SavedModelFromKeras"]}
    assert t["server/ort-cpu"]["details"]["plan"]["route"] == ["keras", "saved_model", "onnx"]


def test_torch_check_against_eager_pytorch(tmp_path):
    _need("torch", "onnxscript")
    r = check_json(tmp_path, FIXTURES / "torch_cnn.pt2", "--targets", "server/ort-cpu",
                   "--dataset", str(FIXTURES / "digits.npz"), "--samples", "50", "--runs", "3")
    assert r["reference"] == "server/torch" and r["model"]["format"] == "torch"
    t = by_id(r)
    assert t["server/torch"]["status"] == "pass" and t["server/ort-cpu"]["status"] == "pass"
    assert t["server/ort-cpu"]["details"]["plan"]["steps"] == ["TorchFromTorch", "OnnxFromTorch"]


def test_the_api_checks_live_torch_and_keras_models():
    _need("torch", "onnxscript", "keras", "tensorflow", "tf2onnx")
    import keras
    import torch

    import portability

    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    r = portability.check(net, "server/ort-cpu", example_inputs=torch.zeros(1, 3, 4), runs=3)
    assert r.reference == "server/torch" and r.model["format"] == "torch"
    assert [(t.id, t.status) for t in r.targets] == [("server/torch", "pass"), ("server/ort-cpu", "pass")]
    km = keras.Sequential([keras.Input(shape=(6,), name="x"), keras.layers.Dense(3)])
    r = portability.check(km, "server/tf", runs=3)
    assert r.reference == "server/keras" and [t.status for t in r.targets] == ["pass", "pass"]
    with pytest.raises(portability.core.errors.UsageError, match="example_inputs"):
        portability.check(net, "server")


def _runnable(tid: str) -> None:
    from portability.targets import availability, registry

    a = availability(registry()[tid])
    if not a.ok:
        pytest.skip(f"{tid}: {a.reason}")


@pytest.mark.mobile
@pytest.mark.web
def test_a_tflite_source_runs_on_litert_and_litert_js(tmp_path):
    for tid in ("mobile/tflite-fp32", "web/litert-js"):
        _runnable(tid)
    r = check_json(tmp_path, FIXTURES / "keras_cnn.tflite", "--targets", "mobile/tflite-fp16,web/litert-js",
                   "--dataset", str(FIXTURES / "digits_nhwc.npz"), "--samples", "20", "--runs", "3", "--allow-skipped")
    t = by_id(r)
    assert r["reference"] == "mobile/tflite-fp32" and r["model"]["format"] == "tflite"
    assert t["web/litert-js"]["status"] == "pass" and t["web/litert-js"]["details"]["plan"]["steps"] == ["TfliteFromTflite"]
    assert t["mobile/tflite-fp16"]["status"] == "skipped" and "no converter route from tflite" in t["mobile/tflite-fp16"]["error"]


@pytest.mark.web
def test_a_tfjs_source_runs_against_the_cpu_backend(tmp_path):
    for tid in ("web/tfjs-cpu", "web/tfjs-wasm"):
        _runnable(tid)
    r = check_json(tmp_path, FIXTURES / "keras_cnn_tfjs", "--targets", "web/tfjs-wasm",
                   "--dataset", str(FIXTURES / "digits_nhwc.npz"), "--samples", "20", "--runs", "3")
    assert r["reference"] == "web/tfjs-cpu" and r["model"]["format"] == "tfjs"
    assert [t["status"] for t in r["targets"]] == ["pass", "pass"]
    assert r["targets"][0]["metrics"]["accuracy"] >= 0.8
