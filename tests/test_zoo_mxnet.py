"""The study's MXNet models: each architecture trained one optimizer step by the real training command in
MXNet's own environment (``portability setup mxnet``), exported to ONNX by MXNet's exporter, and the
export run here, in the main environment, with ONNX Runtime against MXNet's own logits.

Needs the provisioned environment; skipped with the reason otherwise (a failure under
``PORTABILITY_REQUIRE_RUNTIMES=1``, as for the other runtimes)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models import data as study_data
from models import spec
from portability.core import mxnet_env

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-4
_VENV = mxnet_env.venv_dir()  # the user's environment, found before conftest privatizes the cache dir
_OK, _WHY = mxnet_env.status()

pytestmark = [pytest.mark.slow, pytest.mark.mxnet]


def _require_env() -> None:
    """Skip without MXNet's environment (with PORTABILITY_REQUIRE_RUNTIMES=1, conftest turns the skip of
    an ``mxnet``-marked test into a failure: there a missing environment is a broken install)."""
    if not _OK:
        pytest.skip(_WHY)


def test_pins_have_one_source():
    """requirements/mxnet.txt says what portability.core.mxnet_env.PINS says (the constant serves installs
    without the repository)."""
    assert mxnet_env.requirements() == list(mxnet_env.PINS)
    assert mxnet_env.REQUIREMENTS.is_file()


def test_status_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTABILITY_MXNET_VENV", str(tmp_path / "none"))
    ok, why = mxnet_env.status()
    assert not ok and mxnet_env.SETUP_HINT in why and str(tmp_path / "none") in why
    (tmp_path / "none" / "bin").mkdir(parents=True)
    (tmp_path / "none" / "bin" / "python").touch()
    ok, why = mxnet_env.status()
    assert not ok and "import test" in why and mxnet_env.SETUP_HINT in why


def test_models_package_never_imports_mxnet():
    """``import models`` and the framework-free modules stay importable in the main environment."""
    code = ("import sys, models, models.spec, models.common, models.data, models.mxnet\n"
            "assert 'mxnet' not in sys.modules, 'mxnet imported'\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])))


def _dataset(name: str, cache: Path) -> Path:
    try:
        return study_data.prepare(name, cache)
    except study_data.DataUnavailable as e:
        if os.environ.get("PORTABILITY_REQUIRE_RUNTIMES") == "1":
            pytest.fail(str(e))
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The prepared datasets (made once for this module from the installed packages)."""
    cache = tmp_path_factory.mktemp("studydata")
    return lambda name: _dataset(name, cache)


def train(arch: str, dataset: Path, out: Path, profile: str = "step") -> dict:
    """``python -m models.mxnet.train`` in MXNet's environment; returns meta.json."""
    env = dict(mxnet_env.env(ROOT), PORTABILITY_MXNET_VENV=str(_VENV))
    p = subprocess.run([str(_VENV / "bin" / "python"), "-m", "models.mxnet.train", "--arch", arch, "--data", str(dataset),
                        "--dataset", dataset.stem, "--profile", profile, "--seed", "0", "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    events = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert events and events[-1]["event"] == "done", p.stdout[-2000:]
    return json.loads((out / "meta.json").read_text())


@pytest.fixture(scope="module")
def trained(tmp_path_factory, datasets):
    """Each architecture trained one step (on its default dataset) and exported, once per module."""
    runs: dict[str, tuple[Path, dict]] = {}

    def get(arch: str):
        _require_env()
        if arch not in runs:
            out = tmp_path_factory.mktemp(f"mx-{arch}")
            runs[arch] = out, train(arch, datasets(spec.DEFAULT_DATASET[arch]), out)
        return runs[arch]

    return get


@pytest.mark.parametrize("arch", sorted(spec.ARCHS))
def test_train_one_step_and_export(trained, arch):
    out, meta = trained(arch)
    task = spec.ARCHS[arch]["task"]
    assert meta["framework"] == "mxnet" and meta["version"] == "1.9.1" and meta["arch"] == arch
    assert meta["profile"] == "step" and meta["train_samples"] == 64 and meta["eval_samples"] == 32
    assert len(meta["history"]) == 1 and np.isfinite(meta["history"][0]["loss"])
    assert 0.0 <= meta["accuracy_eval"] <= 1.0 and 0.0 <= meta["accuracy_test"] <= 1.0
    assert meta["params"] > 0
    with np.load(out / "eval.npz") as z:
        x, y = z["x"], z["y"]
    logits = np.load(out / "eval_logits.npy")
    classes = spec.DATASETS[spec.DEFAULT_DATASET[arch]]["classes"]
    assert logits.shape == (len(y), classes) and len(y) == 32
    assert x.dtype == np.float32 and meta["input"]["dtype"] == "float32"
    assert list(x.shape[1:]) == ([1, 28, 28] if task == "image" else [spec.TEXT["length"]])
    assert meta["accuracy_eval"] == pytest.approx(float((logits.argmax(-1) == y).mean()))
    if task == "text":
        assert np.array_equal(x, np.round(x)) and x.max() < spec.TEXT["vocab"]  # ids, exactly, as float32

    exp = meta["export"]
    assert exp["status"] in ("ok", "error")
    if exp["status"] == "error":  # a failed export is a well-formed result, not a crash
        assert exp["error"] and isinstance(exp["error"], str) and ":" in exp["error"]
        assert "traceback" in exp and exp["seconds"] >= 0
        return
    import onnx
    import onnxruntime as ort

    assert exp["file"] == "model.onnx"
    model = onnx.load(str(out / "model.onnx"))
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == [exp["input"]]  # the weights are no inputs
    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {exp["input"]: x})[0]
    assert got.shape == logits.shape
    assert np.max(np.abs(got - logits)) <= TOL
    one = sess.run(None, {exp["input"]: x[:1]})[0]  # the batch is dynamic
    assert np.max(np.abs(one - logits[:1])) <= TOL
    if exp.get("max_abs_vs_framework") is not None:  # verified in MXNet's environment too
        assert exp["max_abs_vs_framework"] <= TOL


def test_check_runs_the_mxnet_export(trained, tmp_path):
    """``portability check`` on MXNet's LeNet-5 export, on the training command's own eval set."""
    out, meta = trained("lenet5")
    if meta["export"]["status"] != "ok":
        pytest.fail(f"LeNet-5's ONNX export failed: {meta['export']['error']}")
    from portability import api

    report = api.check(str(out / "model.onnx"), targets=["server/ort-cpu"], dataset=str(out / "eval.npz"))
    t = report.target("server/ort-cpu")
    assert t is not None, [x.id for x in report.targets]
    assert t.status == "pass", json.dumps(t.to_dict(), indent=1, default=str)[:3000]
    assert report.passed
