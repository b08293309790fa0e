"""Bundle and ingest: the web targets of a check written to a folder, run in a browser from a plain static
server (here the project's headless Chromium), and the page's result.json brought back into the report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, by_id, run_cli

pytestmark = [pytest.mark.web]

LENET = ROOT / "fixtures" / "lenet.onnx"
#: onnxruntime-web, TF.js (channels-last) and LiteRT.js (outputs named by signature key, not tensor)
TARGETS = ("web/ort-wasm", "web/tfjs-cpu", "web/litert-js")


def _missing() -> str | None:
    from portability.runtimes.ort_web import OrtWeb
    from portability.runtimes.tfjs import Tfjs

    a = next((a for a in (OrtWeb.availability(), Tfjs.availability()) if not a.ok), None)
    return None if a is None else f"{a.reason} (fix: {a.hint})"


_WHY = _missing()


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """``bundle --serve`` in a process of its own, the page opened in headless Chromium: (folder, report,
    result file, environment with the module's own history)."""
    if _WHY:
        pytest.skip(f"web stack missing: {_WHY}")
    from portability.web.browser import Browser

    tmp = tmp_path_factory.mktemp("bundle")
    env = dict(os.environ, PORTABILITY_DATA_DIR=str(tmp / "data"))
    folder, report = tmp / "site", tmp / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "portability", "bundle", str(LENET), "-t", ",".join(TARGETS), "-o", str(folder),
                             "--json", str(report), "--serve", "--port", "0"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), f"no URL printed; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"
        _served_read_only(url)
        browser = Browser().start()
        try:
            browser.new_page(url)
            browser.wait_for("() => window.bundleResult !== undefined || window.bundleError !== undefined", 180)
            assert browser.call("() => window.bundleError") is None
            result = browser.call("() => window.bundleResult")
        finally:
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    path = tmp / "result.json"
    path.write_text(json.dumps(result))
    return folder, json.loads(report.read_text()), path, env


def _served_read_only(url: str) -> None:
    with urllib.request.urlopen(url + "bundle.mjs") as r:
        assert r.headers["Content-Type"].startswith("text/javascript")
        assert r.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
    req = urllib.request.Request(url + "manifest.json", data=b"{}", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "../../etc/passwd")
    assert e.value.code == 404


def _runs(env: dict) -> int:
    p = run_cli("history", "--json", env=env)
    assert p.returncode == 0, p.stderr
    return len(json.loads(p.stdout or "[]"))


def test_bundle_folder(ran):
    folder, report, _, _ = ran
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["model"]["sha256"] == report["model"]["sha256"]
    assert [t["id"] for t in manifest["targets"]] == list(TARGETS)
    for t in manifest["targets"]:
        assert (folder / t["model"]).is_file() and (folder / t["feeds"]["url"]).is_file()
        assert t["thresholds"] == {k: by_id(report)[t["id"]]["thresholds"][k] for k in ("max_abs", "cosine")}
    assert (folder / "m" / "onnxruntime-web" / "dist" / "ort.wasm.min.mjs").is_file()
    assert not (folder / "m" / "onnxruntime-web" / "dist" / "ort.webgpu.min.mjs").exists()  # only what the page loads


def test_browser_result_ingested(ran, tmp_path):
    _, report, result, env = ran
    doc = json.loads(result.read_text())
    assert doc["model"]["sha256"] == report["model"]["sha256"] and doc["device"]["user_agent"]
    before = _runs(env)
    out = tmp_path / "joined.json"
    p = run_cli("ingest", str(result), "--out", str(out), env=env)
    assert p.returncode == 0, p.stderr
    assert _runs(env) == before + 1
    joined = by_id(json.loads(out.read_text()))
    checked = by_id(report)
    for tid in TARGETS:
        [got] = [t for i, t in joined.items() if i.startswith(tid + "@")]
        assert got["status"] == checked[tid]["status"] == "pass", got
        lim = checked[tid]["thresholds"]
        for name, m in got["metrics"]["outputs"].items():
            assert m["max_abs"] <= lim["max_abs"] * max(1.0, m["ref_max_abs"]) and m["cosine"] >= lim["cosine"]
            assert m["max_abs"] <= 10 * max(checked[tid]["metrics"]["outputs"][name]["max_abs"], 1e-6)
        assert got["metrics"]["latency_ms"]["p50"] > 0


def _refused(path: Path, env: dict, *args: str) -> str:
    before = _runs(env)
    p = run_cli("ingest", str(path), *args, env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert _runs(env) == before  # nothing recorded
    return lines[0]


def test_truncated_refused(ran, tmp_path):
    _, _, result, env = ran
    bad = tmp_path / "cut.json"
    bad.write_text(result.read_text()[: len(result.read_text()) // 2])
    assert "not a complete JSON" in _refused(bad, env)


def test_other_model_refused(ran, tmp_path):
    _, _, result, env = ran
    doc = json.loads(result.read_text())
    doc["model"]["sha256"] = "f" * 64
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps(doc))
    assert "no check of model ffffffffffff" in _refused(bad, env)
    report = tmp_path / "r.json"
    report.write_text(json.dumps(ran[1]))
    assert "not the same model" in _refused(bad, env, "--report", str(report))


def test_forged_refused(ran, tmp_path):
    _, _, result, env = ran
    doc = json.loads(result.read_text())
    doc["targets"][0]["outputs"]["logits"]["max_abs"] = 0.5  # a pass whose numbers breach the bound
    bad = tmp_path / "forged.json"
    bad.write_text(json.dumps(doc))
    assert "forged or inconsistent" in _refused(bad, env)
    doc = json.loads(result.read_text())
    doc["targets"][1]["latency_ms"]["p50"] = 1e-3  # not the median of its samples
    bad.write_text(json.dumps(doc))
    assert "not the median" in _refused(bad, env)
