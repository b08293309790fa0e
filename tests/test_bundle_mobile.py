"""Mobile bundles: the mobile targets of a check written to a folder with their model files, inputs, the
reference's outputs and ``run.py``; the runner run on an ARM64 device (here the project's qemu-aarch64
emulation stands in for a board) and on this host, and its result.json brought back into the report."""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, by_id, run_cli
from portability.mobile import arm64

pytestmark = [pytest.mark.arm64]

LENET = ROOT / "fixtures" / "lenet.onnx"
TARGETS = ("mobile/tflite-fp32", "mobile/ort-mobile")
_HOME = arm64.home()  # the user's provisioned emulator, found before conftest privatizes the cache dir
_OK, _WHY = arm64.status()
_MISSING = [m for m in ("onnx2tf", "tensorflow", "ai_edge_litert", "onnxruntime") if importlib.util.find_spec(m) is None]


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """``bundle`` of LeNet for the two targets: (folder, its check's report file, report, environment)."""
    if _MISSING:
        pytest.skip(f"mobile stack not installed: {', '.join(_MISSING)}")
    tmp = tmp_path_factory.mktemp("mobile-bundle")
    env = {"PORTABILITY_DATA_DIR": str(tmp / "data")}
    folder, report = tmp / "bundle", tmp / "report.json"
    p = run_cli("bundle", str(LENET), "-t", ",".join(TARGETS), "-o", str(folder), "--json", str(report), "--no-history", env=env)
    assert p.returncode == 0, p.stderr
    return folder, report, json.loads(report.read_text()), env


def _run(argv: list[str], env: dict, folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv + ["run.py", *args], env=env, cwd=folder, capture_output=True, text=True, timeout=600)


def _ingest(result: Path, bundled, out: Path, *args: str) -> subprocess.CompletedProcess:
    _, report, _, env = bundled
    return run_cli("ingest", str(result), "--report", str(report), "--out", str(out), "--no-history", *args, env=env)


def _joined_like_the_check(out: Path, report: dict, device: str) -> None:
    """Each target ingested as ``<id>@<device>``, with the check's status and drift within its bounds."""
    joined, checked = by_id(json.loads(out.read_text())), by_id(report)
    for tid in TARGETS:
        got = joined[f"{tid}@{device}"]
        assert got["status"] == checked[tid]["status"], got
        assert got["platform"] == "mobile"
        lim = checked[tid]["thresholds"]
        for name, m in got["metrics"]["outputs"].items():
            assert m["max_abs"] <= lim["max_abs"] * max(1.0, m["ref_max_abs"]) and m["cosine"] >= lim["cosine"]
        lat = got["metrics"]["latency_ms"]
        assert lat["p50"] > 0 and len(lat["samples"]) >= 3


def test_mobile_bundle_folder(bundled):
    folder, _, report, _ = bundled
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["model"]["sha256"] == report["model"]["sha256"] and manifest["reference"] == report["reference"]
    assert [t["id"] for t in manifest["targets"]] == list(TARGETS)
    assert (folder / "run.py").is_file()
    data = {}
    for t in manifest["targets"]:
        assert (folder / t["model"]).is_file()
        assert t["thresholds"] == {k: by_id(report)[t["id"]]["thresholds"][k] for k in ("max_abs", "cosine")}
        with np.load(folder / t["data"], allow_pickle=False) as z:
            data[t["runtime"]] = {k: z[k] for k in z.files}
    assert (folder / manifest["targets"][0]["model"]).suffix == ".tflite"
    assert (folder / manifest["targets"][1]["model"]).suffix == ".ort"
    # the same inputs: ONNX's NCHW for ORT, the .tflite file's NHWC for LiteRT
    nchw, nhwc = data["ort"]["feed_0_0_0"], data["litert"]["feed_0_0_0"]
    assert nchw.ndim == 4 and np.array_equal(nchw.transpose(0, 2, 3, 1), nhwc)


@pytest.mark.skipif(not _OK, reason=f"{_WHY} (run: {arm64.SETUP_HINT})")
def test_emulated_arm64_run_ingested(bundled, tmp_path, monkeypatch):
    folder, _, report, _ = bundled
    monkeypatch.setenv("PORTABILITY_ARM64_DIR", str(_HOME))
    argv, env = arm64.command()
    p = _run(argv, env, folder, "--out", str(tmp_path / "result.json"))
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "result.json").read_text())
    assert doc["device"]["machine"] == "aarch64" and doc["skipped"] == []
    out = tmp_path / "joined.json"
    p = _ingest(tmp_path / "result.json", bundled, out)
    assert p.returncode == 0, p.stderr
    from portability.bundle.ingest import device_slug

    slug = device_slug(doc["device"])
    assert slug.startswith("aarch64")
    _joined_like_the_check(out, report, slug)


def test_host_run_ingested(bundled, tmp_path):
    folder, _, report, _ = bundled
    p = _run([sys.executable], dict(os.environ), folder, "--out", str(tmp_path / "result.json"), "--runs", "5")
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "result.json").read_text())
    assert doc["device"]["machine"] == platform.machine()
    from portability.bundle.ingest import device_slug

    p = _ingest(tmp_path / "result.json", bundled, tmp_path / "joined.json")
    assert p.returncode == 0, p.stderr
    _joined_like_the_check(tmp_path / "joined.json", report, device_slug(doc["device"]))


def test_missing_runtime_skipped(bundled, tmp_path):
    """A runtime that cannot be imported: its target is skipped with the reason, the others run."""
    folder = bundled[0]
    fake = tmp_path / "site" / "onnxruntime"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('not here')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    p = _run([sys.executable], env, folder, "--out", str(tmp_path / "result.json"), "--runs", "3")
    assert p.returncode == 0, p.stderr
    assert "skipped    mobile/ort-mobile: ONNX Runtime is not installed" in p.stdout
    doc = json.loads((tmp_path / "result.json").read_text())
    assert [t["id"] for t in doc["targets"]] == ["mobile/tflite-fp32"]
    assert [s["id"] for s in doc["skipped"]] == ["mobile/ort-mobile"]


def test_forged_model_refused(bundled, tmp_path):
    folder = bundled[0]
    p = _run([sys.executable], dict(os.environ), folder, "--out", str(tmp_path / "result.json"), "--runs", "3")
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "result.json").read_text())
    doc["model"]["sha256"] = "f" * 64
    bad = tmp_path / "forged.json"
    bad.write_text(json.dumps(doc))
    p = _ingest(bad, bundled, tmp_path / "never.json")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not the same model" in lines[0], p.stderr
    assert not (tmp_path / "never.json").exists()


def test_one_platform_per_bundle(tmp_path):
    p = run_cli("bundle", str(LENET), "-t", "web/ort-wasm,mobile/ort-mobile", "-o", str(tmp_path / "b"), "--no-history")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "one platform per bundle" in lines[0], p.stderr
    assert not (tmp_path / "b").exists()


def test_runner_ships_as_package_data():
    from portability.bundle.mobile import ENGINES, RUNNER

    assert RUNNER.is_file() and RUNNER.parent.name == "runner"
    assert "bundle/runner/*" in (ROOT / "pyproject.toml").read_text()
    # the runner and its engines need only Python 3, numpy and the runtimes: they import nothing of portability
    for f in (RUNNER, ENGINES):
        assert "portability" not in "".join(ln for ln in f.read_text().splitlines() if ln.startswith(("import", "from")))


def test_one_device_engine_per_runtime():
    """The engine a runtime runs on a device is the one the emulated ARM64 runtime runs, named by the runtime
    class; a bundle runs the targets whose runtime has one and is not emulated (no table of its own)."""
    from portability.bundle.mobile import _runnable
    from portability.mobile.device_engines import ENGINES
    from portability.runtimes.arm64 import Arm64Ort, Arm64Tflite
    from portability.runtimes.litert import LiteRt
    from portability.runtimes.ort_mobile import OrtMobile

    assert Arm64Tflite.device_engine == LiteRt.device_engine and Arm64Ort.device_engine == OrtMobile.device_engine
    assert {LiteRt.device_engine, OrtMobile.device_engine} <= set(ENGINES)
    spec, left = _runnable("mobile")
    assert spec.split(",") == ["mobile/tflite-fp32", "mobile/tflite-fp32-builtin", "mobile/tflite-fp16",
                               "mobile/tflite-dynint8", "mobile/tflite-int8", "mobile/ort-mobile"]
    assert {x.split(" ")[0] for x in left} == {"mobile/executorch-xnnpack", "mobile/executorch-portable", "mobile/coreml",
                                               "mobile/arm64-tflite", "mobile/arm64-ort"}
