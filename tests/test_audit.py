"""``portability audit``: many models checked as ``check`` checks one, with one scorecard; each model's
result written as it finishes, so that an audit killed halfway resumes without checking them again."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from conftest import FIXTURES, ROOT, run_cli

TARGETS = ("--targets", "server/ort-cpu,server/ort-cpu-noopt")


def _folder(tmp_path):
    d = tmp_path / "models"
    d.mkdir()
    for name in ("lenet.onnx", "mlp.onnx", "two_outputs.onnx"):
        shutil.copyfile(FIXTURES / name, d / name)
    return d


def test_an_audit_of_a_folder_gives_a_row_per_model_and_a_scorecard(tmp_path):
    d = _folder(tmp_path)
    (d / "broken.onnx").write_bytes(b"not a model at all")
    out, md = tmp_path / "audit.json", tmp_path / "audit.md"
    p = run_cli("audit", str(d), *TARGETS, "--json", str(out), "--markdown", str(md))
    assert p.returncode == 1, p.stdout + p.stderr  # the broken model fails the audit
    doc = json.loads(out.read_text())
    status = {os.path.basename(m["path"]): m["status"] for m in doc["models"]}
    assert status == {"broken.onnx": "error", "lenet.onnx": "passed", "mlp.onnx": "passed", "two_outputs.onnx": "passed"}
    broken = next(m for m in doc["models"] if m["path"].endswith("broken.onnx"))
    assert "\n" not in broken["error"] and broken["targets"] == []
    card = doc["scorecard"]
    assert card["models"] == 4 and card["models_passed"] == 3
    assert card["targets"]["server/ort-cpu-noopt"]["pass_rate"] == 1.0
    assert all(t["status"] == "pass" for m in doc["models"] for t in m["targets"])
    assert "server/ort-cpu-noopt" in md.read_text() and "3 of 4 models passed" in md.read_text()


def test_a_killed_audit_resumes_without_checking_the_finished_models_again(tmp_path):
    d = _folder(tmp_path)
    state = d / ".portability-audit"
    cmd = [sys.executable, "-m", "portability", "audit", str(d), *TARGETS, "--json", str(tmp_path / "a.json")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (state.is_dir() and list(state.glob("*.json"))):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # halfway: one model finished, the next one under way
    proc.wait()
    finished = len(list(state.glob("*.json")))
    assert 1 <= finished < 3, finished
    p = run_cli("audit", str(d), *TARGETS, "--json", str(tmp_path / "b.json"))
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("finished earlier") == finished and p.stderr.count("checking") == 3 - finished
    again = run_cli("audit", str(d), *TARGETS, "--json", str(tmp_path / "c.json"))
    assert again.stderr.count("finished earlier") == 3
    strip = lambda doc: {k: v for k, v in doc["scorecard"].items() if k != "targets"}  # noqa: E731
    b, c = (json.loads((tmp_path / f).read_text()) for f in ("b.json", "c.json"))
    assert strip(b) == strip(c)
    p = run_cli("audit", str(d), *TARGETS, "--rerun")
    assert p.stderr.count("checking") == 3


def test_a_manifest_gives_each_model_its_own_settings(tmp_path):
    manifest = tmp_path / "audit.toml"
    manifest.write_text(f"""
[defaults]
targets = "server/ort-cpu"
[[model]]
path = "{FIXTURES / 'lenet.onnx'}"
dataset = "{FIXTURES / 'digits.npz'}"
[[model]]
path = "{FIXTURES / 'mlp_dynamic.onnx'}"
targets = "server/ort-cpu-noopt"
shapes = ["x=3x1x28x28"]
""")
    out = tmp_path / "a.json"
    p = run_cli("audit", str(manifest), "--json", str(out))
    assert p.returncode == 0, p.stderr
    lenet, mlp = json.loads(out.read_text())["models"]
    assert [t["id"] for t in lenet["targets"]] == ["server/ort-cpu"] and lenet["targets"][0]["metrics"]["accuracy"] > 0.9
    assert [t["id"] for t in mlp["targets"]] == ["server/ort-cpu", "server/ort-cpu-noopt"]
    assert mlp["model"]["inputs"][0]["name"] == "x"


def test_a_bad_manifest_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[model]]\nfile = 'x.onnx'\n")
    p = run_cli("audit", str(bad))
    assert p.returncode == 2 and "has no path" in p.stderr
