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
    assert status == {"broken.onnx": "load-error", "lenet.onnx": "pass", "mlp.onnx": "pass", "two_outputs.onnx": "pass"}
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


def _comparable(card: dict) -> dict:
    """A scorecard without what varies run to run (latency)."""
    card = json.loads(json.dumps(card))
    for t in card["targets"].values():
        t.pop("median_p50_ms", None)
    return card


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_same_audit_on_a_ray_cluster_gives_the_same_scorecard(tmp_path):
    d = _folder(tmp_path)
    (d / "broken.onnx").write_bytes(b"not a model at all")
    port = _free_port()
    ray = [sys.executable, "-m", "ray.scripts.scripts"]
    env = dict(os.environ, RAY_AUTH_MODE="disabled")  # a cluster of this test alone, on the loopback
    start = subprocess.run([*ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                            "--include-dashboard=false", "--disable-usage-stats"], capture_output=True, text=True,
                           timeout=180, env=env)
    assert start.returncode == 0, start.stdout + start.stderr
    try:
        p = run_cli("audit", str(d), *TARGETS, "--executor", "ray", "--address", f"127.0.0.1:{port}", "--workers", "2",
                    "--json", str(tmp_path / "ray.json"), env={"RAY_AUTH_MODE": "disabled"})
        assert p.returncode == 1, p.stdout + p.stderr  # the broken model, as locally
        assert p.stderr.count("checking") == 4
    finally:
        subprocess.run([*ray, "stop", "--force"], capture_output=True, timeout=120, env=env)
    local = run_cli("audit", str(d), *TARGETS, "--rerun", "--json", str(tmp_path / "local.json"))
    assert local.returncode == 1, local.stderr
    by_ray, by_local = (json.loads((tmp_path / f).read_text()) for f in ("ray.json", "local.json"))
    assert _comparable(by_ray["scorecard"]) == _comparable(by_local["scorecard"])
    assert by_ray["scorecard"]["models_passed"] == 3 and by_ray["scorecard"]["models_unreadable"] == 1
    # the Ray run's results are the audit's state: a local rerun without --rerun resumes them all
    again = run_cli("audit", str(d), *TARGETS)
    assert again.stderr.count("finished earlier") == 4


def test_a_ray_cluster_that_cannot_be_joined_is_one_line(tmp_path):
    d = _folder(tmp_path)
    p = run_cli("audit", str(d), *TARGETS, "--executor", "ray", "--address", f"127.0.0.1:{_free_port()}")
    assert p.returncode == 2 and "could not start or join the Ray cluster" in p.stderr
    assert "Traceback" not in p.stderr


def test_onnx_conformance_cases_are_checked_against_the_specs_outputs(tmp_path):
    out, html = tmp_path / "conf.json", tmp_path / "conf.html"
    p = run_cli("audit", "--onnx-conformance", "--ops", "Abs,Relu,Softmax", "--targets", "server/ort-cpu-noopt",
                "--json", str(out), "--html", str(html), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(out.read_text())
    assert sorted(m["op"] for m in doc["models"]) == ["Abs", "Relu", "Softmax"]
    for m in doc["models"]:
        for t in m["targets"]:
            assert t["spec"]["agrees"] and t["spec"]["max_abs"] < 1e-5, (m["name"], t)
    conf = doc["scorecard"]["conformance"]
    assert conf["targets"]["server/ort-cpu-noopt"] == {"ops": 3, "ops_passing": 3, "cases": 3, "cases_passing": 3}
    assert (tmp_path / ".portability-audit").is_dir()  # the state lives where a rerun from here finds it
    page = html.read_text()
    assert "ONNX conformance: 3 cases, 3 op types" in page
    links = [part.split("'")[0] for part in page.split("href='")[1:]]
    assert len(links) == 3 and all((tmp_path / link).is_file() for link in links)
    bad = run_cli("audit", "--onnx-conformance", "--ops", "NoSuchOp", cwd=tmp_path)
    assert bad.returncode == 2 and "no conformance case tests NoSuchOp" in bad.stderr


def test_a_target_that_agrees_with_the_reference_but_not_the_spec_is_a_spec_drift(tmp_path):
    import numpy as np

    from portability.audit.conformance import against_spec
    from portability.audit.unit import ModelResult
    from portability.report.scorecard import build

    np.savez(tmp_path / "expected.npz", y=np.array([1.0, 2.0, 3.0], dtype=np.float32))
    thresholds = {"max_abs": 1e-4, "cosine": 0.9999}
    targets = [{"id": "server/ort-cpu", "status": "pass", "thresholds": thresholds},
               {"id": "web/x", "status": "pass", "thresholds": thresholds},
               {"id": "mobile/y", "status": "convert-error", "thresholds": thresholds}]
    outputs = {"server/ort-cpu": {"y": np.array([[1.0, 2.0, 3.0000002]], dtype=np.float32)},
               "web/x": {"y": np.array([[1.0, 2.0, 3.5]], dtype=np.float32)}}
    against_spec(targets, outputs, tmp_path / "expected.npz", (1e-3, 1e-7))
    assert targets[0]["spec"]["agrees"] and not targets[1]["spec"]["agrees"] and "spec" not in targets[2]
    assert targets[1]["spec"]["max_abs"] == 0.5
    card = build([ModelResult.from_dict({"path": "m.onnx", "name": "test_m", "op": "M", "status": "pass", "targets": targets})])
    cells = card["conformance"]["ops"]["M"]
    assert cells["server/ort-cpu"]["pass"] == 1 and cells["web/x"]["cells"] == {"spec-drift": 1}
    assert cells["mobile/y"]["cells"] == {"convert-error": 1}


def test_an_audit_against_a_baseline_says_what_got_worse_and_what_got_fixed(tmp_path):
    d = _folder(tmp_path)
    (d / "broken.onnx").write_bytes(b"not a model at all")
    first = tmp_path / "first.json"
    assert run_cli("audit", str(d), *TARGETS, "--json", str(first)).returncode == 1
    doc = json.loads(first.read_text())
    for m in doc["models"]:
        if m["path"].endswith("broken.onnx"):  # the baseline read it; now it cannot be read: worse
            m["status"] = "passed"  # written with the older words: read as ``pass``
        if m["path"].endswith("lenet.onnx"):  # the baseline drifted here; now it passes: fixed
            t = next(t for t in m["targets"] if t["id"] == "server/ort-cpu-noopt")
            t["status"] = "drift"
            t["metrics"]["latency_ms"]["p50"] *= 100  # and was 100 times slower
    first.write_text(json.dumps(doc))
    out, md = tmp_path / "second.json", tmp_path / "second.md"
    p = run_cli("audit", str(d), *TARGETS, "--baseline", str(first), "--json", str(out), "--markdown", str(md))
    assert p.returncode == 1 and "1 worse, 1 fixed" in p.stdout, p.stdout + p.stderr
    base = json.loads(out.read_text())["baseline"]
    assert [(os.path.basename(r["model"]), r["now"]) for r in base["worse"]] == [("broken.onnx", "load-error")]
    assert [(os.path.basename(r["model"]), r["target"], r["was"]) for r in base["fixed"]] == \
        [("lenet.onnx", "server/ort-cpu-noopt", "drift")]
    assert base["latency"]["2x faster or more"] >= 1 and "1 worse, 1 fixed" in md.read_text()
    bad = run_cli("audit", str(d), *TARGETS, "--baseline", str(d / "lenet.onnx"))
    assert bad.returncode == 2 and "not the --json of an earlier audit" in bad.stderr
