"""The pytest plugin as a user has it: a test file of theirs, run by pytest in a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import FIXTURES, ROOT

CONFTEST = 'pytest_plugins = ["portability.pytest_plugin"]\n'
USER_TESTS = f'''
from portability.pytest_plugin import assert_portable

LENET = {str(FIXTURES / "lenet.onnx")!r}


def test_lenet_stays_portable_to_the_server():
    assert_portable(LENET, targets=["server/ort-cpu-noopt"], runs=2)


def test_fixture_returns_the_report(portability_check):
    report = portability_check(LENET, targets="server/ort-cpu-noopt", runs=2)
    assert report.passed and report.target("server/ort-cpu-noopt").status == "pass"


def test_noisy_runtime_is_not_portable():
    assert_portable(LENET, targets="test/noisy", runs=2)
'''


def _run_user_tests(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_user_model.py").write_text(USER_TESTS)
    # the user's own pytest run, not a worker of this one (pytest-xdist's variables would say it is)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env = dict(env, PORTABILITY_PLUGINS="doubles", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               PORTABILITY_DATA_DIR=str(tmp_path / "data"))
    # -p no:portability: the installed entry point (if any) would register the plugin a second time
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:portability", "-q",
                           "-o", "addopts=", "--rootdir", str(tmp_path), str(tmp_path), *args],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)


def test_plugin_passes_a_portable_model_and_fails_a_drifting_one(tmp_path):
    p = _run_user_tests(tmp_path, "--junitxml", str(tmp_path / "j.xml"), "-o", "junit_family=xunit1")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "2 passed" in out and "1 failed" in out, out
    assert "FAILED test_user_model.py::test_noisy_runtime_is_not_portable" in out
    # the message names the model, the offending target and the metrics that failed
    assert "lenet.onnx is not portable: 1 of 2 targets failed" in out
    assert "test/noisy: drift — 'logits': max_abs" in out and "cosine" in out
    assert "Traceback" not in out and "portability/api.py" not in out  # the user's line, not ours
    assert "warning" not in out.lower(), out
    # the fixture recorded each target's status as a JUnit property of the test
    xml = (tmp_path / "j.xml").read_text()
    assert 'name="portability.server/ort-cpu-noopt" value="pass"' in xml
