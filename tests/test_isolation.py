"""A target that crashes, hangs or eats memory costs that target only; the report is always written."""
import pytest

from conftest import FIXTURES, by_id, check_json

#: these tests are about the services a check starts, shares and stops itself
pytestmark = [pytest.mark.usefixtures("own_services")]

TEST_TARGETS = {"PORTABILITY_PLUGINS": "doubles"}


def test_crash_hang_and_memory_hog_are_contained(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "server/ort-cpu-noopt,test/abort,test/hang,test/hog",
                   "--memory-limit-mb", "1500", "--runs", "3", env=TEST_TARGETS, expect_rc=1)
    t = by_id(r)
    assert t["test/abort"]["status"] == "crashed" and "SIGABRT" in t["test/abort"]["error"]
    # the line says why it died (the library's assertion), without the noise around it
    assert "Assertion '__n < this->size()' failed" in t["test/abort"]["error"]
    assert "telemetry" not in t["test/abort"]["error"] and "\x1b" not in t["test/abort"]["error"]
    assert t["test/hang"]["status"] == "timeout" and "3 s" in t["test/hang"]["error"]
    assert t["test/hog"]["status"] == "crashed" and "memory" in t["test/hog"]["error"]
    assert t["test/hog"]["metrics"]["peak_rss_mb"] > 1500
    # the others are intact, and the run failed because gating targets failed
    assert t["server/ort-cpu"]["status"] == "pass" and t["server/ort-cpu-noopt"]["status"] == "pass"
    assert r["passed"] is False


def test_no_worker_left_behind(tmp_path):
    import psutil

    work = tmp_path / "work"
    work.mkdir()
    r = check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "test/hang", "--no-cache", env={**TEST_TARGETS, "TMPDIR": str(work)}, expect_rc=1)
    assert by_id(r)["test/hang"]["status"] == "timeout"
    mine = [p for p in psutil.process_iter(["cmdline"]) if str(work) in " ".join(p.info["cmdline"] or [])]
    assert mine == []
    assert [p.name for p in work.iterdir() if p.name.startswith("portability")] == []  # scratch folders gone too


def test_drift_and_fallback_statuses(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "test/noisy,test/fallback", "--runs", "2",
                   env=TEST_TARGETS, expect_rc=1)
    t = by_id(r)
    assert t["test/noisy"]["status"] == "drift"
    assert any("max_abs" in b for b in t["test/noisy"]["breaches"])
    assert t["test/noisy"]["metrics"]["outputs"]["logits"]["max_abs"] > 0.05
    assert t["test/fallback"]["status"] == "fallback"
    assert "FancyExecutionProvider" in t["test/fallback"]["breaches"][0]


def test_cross_check_does_not_fail_the_run_unless_gated(tmp_path):
    args = ("--targets", "test/noisy", "--runs", "0")
    r = check_json(tmp_path, FIXTURES / "mlp.onnx", *args, "--gate", "-test/noisy", env=TEST_TARGETS, expect_rc=0)
    noisy = by_id(r)["test/noisy"]
    assert noisy["status"] == "drift" and noisy["gating"] is False and r["passed"] is True
    assert any("cross-check" in n for n in noisy["notes"])
    r = check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "server/onnx-reference", "--gate", "server/onnx-reference",
                   "--runs", "0", env=TEST_TARGETS, expect_rc=0)
    assert by_id(r)["server/onnx-reference"]["gating"] is True


@pytest.mark.parametrize("flags, passes", [
    (("--max-abs", "1", "--cosine", "0.5", "--min-top1", "0"), True),
    (("--max-abs", "1", "--cosine", "0.999999", "--min-top1", "0"), False),  # a tighter cosine catches it
    (("--cosine", "0.5", "--min-top1", "0"), False),  # the default max_abs bound still catches it
])
def test_thresholds_from_flags(tmp_path, flags, passes):
    r = check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "test/noisy", "--runs", "0", *flags,
                   env=TEST_TARGETS, expect_rc=0 if passes else 1)
    noisy = by_id(r)["test/noisy"]
    assert noisy["status"] == ("pass" if passes else "drift")
    if "--max-abs" in flags:
        assert noisy["thresholds"]["max_abs"] == 1


def test_thresholds_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.portability]\nruns = 0\n[tool.portability.thresholds]\nmax_abs = 1.0\ncosine = 0.5\ntop1_agreement = 0\n'
        '[tool.portability.thresholds."test/fallback"]\nmax_abs = 0.25\n')
    from conftest import run_cli

    out = tmp_path / "r.json"
    import json
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "portability", "check", str(FIXTURES / "mlp.onnx"), "-t", "test/noisy",
                        "--json", str(out)], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, **TEST_TARGETS))
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert by_id(r)["test/noisy"]["thresholds"]["max_abs"] == 1.0
    assert by_id(r)["server/ort-cpu"]["metrics"]["latency_ms"]["runs"] == 0
    (tmp_path / "pyproject.toml").write_text("[tool.portability]\nbogus = 1\n")
    p = run_cli("check", str(FIXTURES / "mlp.onnx"), cwd=tmp_path)
    assert p.returncode == 2 and "unknown setting 'bogus'" in p.stderr


def test_reference_named_odd_one_out_when_others_agree(tmp_path):
    r = check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "test/noisy,test/noisy-twin,server/ort-cpu-noopt", "--runs", "0",
                   env=TEST_TARGETS, expect_rc=1)
    assert any("test/noisy, test/noisy-twin agree with each other but not with the reference" in n for n in r["notes"])
    r = check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "test/noisy,server/ort-cpu-noopt", "--runs", "0",
                   env=TEST_TARGETS, expect_rc=1)
    assert not any("odd one out" in n for n in r["notes"])


def test_unknown_gate_id_is_a_usage_error():
    from conftest import run_cli

    p = run_cli("check", str(FIXTURES / "mlp.onnx"), "--gate", "web/ort-wasn")
    assert p.returncode == 2 and "--gate names 'web/ort-wasn'" in p.stderr


def test_a_workers_process_tree_is_read_from_the_kernels_child_lists():
    """The runner watches a worker's memory (and kills its tree) from the kernel's per-thread child lists: the
    same processes psutil finds by reading every process's status, children of children and of threads included."""
    import subprocess
    import sys
    import time

    import psutil

    from portability.workers.tree import tree as _tree

    code = ("import subprocess, threading, time\n"
            "threading.Thread(target=lambda: subprocess.Popen(['sleep', '30'])).start()\n"
            "subprocess.Popen(['sh', '-c', 'sleep 30 & sleep 30 & wait'])\n"
            "time.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        want: set[int] = set()
        for _ in range(100):  # until all five processes are there
            want = {p.pid} | {c.pid for c in psutil.Process(p.pid).children(recursive=True)}
            if len(want) == 5:
                break
            time.sleep(0.05)
        assert len(want) == 5
        assert {q.pid for q in _tree(p.pid)} == want
    finally:
        for q in _tree(p.pid):
            q.kill()
        p.wait()
    assert _tree(p.pid) == []
