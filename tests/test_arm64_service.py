"""The check's shared ARM64 emulator: one emulated fork server per check, one forked emulated child per
ARM64 target, over a unix socket (``mobile/arm64_service.py``, ``arm64_server.py --listen``).

Needs the provisioned environment (``portability setup arm64``); skipped with the reason otherwise."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, by_id, check_json
from mobile_models import conv_model, convert, reference
from portability.mobile import arm64

_HOME = arm64.home()  # the user's provisioned environment, found before conftest privatizes the cache dir
_OK, _WHY = arm64.status()
_MISSING = [m for m in ("onnx2tf", "tensorflow", "ai_edge_litert") if importlib.util.find_spec(m) is None]
needs_emulator = pytest.mark.skipif(not _OK, reason=f"{_WHY} (run: {arm64.SETUP_HINT})")
needs_mobile = pytest.mark.skipif(bool(_MISSING), reason=f"mobile stack not installed: {', '.join(_MISSING)}")
#: these tests are about the services a check starts, shares and stops itself
pytestmark = [pytest.mark.arm64, pytest.mark.usefixtures("own_services")]


@pytest.fixture(autouse=True)
def _provisioned_env(monkeypatch):
    monkeypatch.setenv("PORTABILITY_ARM64_DIR", str(_HOME))


@pytest.fixture
def scratch(request) -> Path:
    """A temp folder of the test's own: the shared server's socket folder goes there."""
    d = Path(tempfile.mkdtemp(prefix="arm64-svc-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


def _emulators() -> set[int]:
    """Live emulated processes (``pgrep -f qemu-aarch64``) that run this checkout's ARM64 server."""
    from portability.runtimes.arm64 import SERVER

    pids = subprocess.run(["pgrep", "-f", "qemu-aarch64"], capture_output=True, text=True).stdout.split()
    out = set()
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(SERVER) in cmd:
            out.add(int(pid))
    return out


def _check(tmp_path, scratch, targets: str, expect_rc: int | None = 0, *more: str) -> dict:
    env = {"PORTABILITY_PLUGINS": "doubles", "TMPDIR": str(scratch), "PORTABILITY_ARM64_DIR": str(_HOME)}
    return by_id(check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", targets, "--runs", "3", "--no-history",
                            *more, env=env, expect_rc=expect_rc))


@needs_emulator
@needs_mobile
def test_both_arm64_targets_share_one_emulator_and_leave_none(tmp_path, scratch):
    before = _emulators()
    t = _check(tmp_path, scratch, "mobile/arm64-tflite,mobile/arm64-ort")
    for tid in ("mobile/arm64-tflite", "mobile/arm64-ort"):
        assert t[tid]["status"] == "pass", (t[tid]["error"], t[tid]["details"].get("log_tail"))
        d = t[tid]["details"]
        assert d["shared_emulator"] is True and d["machine"] == "aarch64" and d["emulated_peak_rss_mb"] > 0
        assert t[tid]["metrics"]["outputs"]["logits"]["max_abs"] < 1e-4
    assert not _emulators() - before, "an emulated process outlived its check"
    assert not list(scratch.glob("portability-arm64-*")), "the shared emulator's folder was left behind"


@needs_emulator
@needs_mobile
def test_a_crashed_emulated_child_costs_its_target_only(tmp_path, scratch):
    before = _emulators()
    # the crashing double SIGKILLs the shared emulator's child from its worker: a signal out of its sandbox,
    # which the sandbox's signal scope forbids (as it should for a model's code)
    t = _check(tmp_path, scratch, "test/arm64-crash,mobile/arm64-tflite,mobile/arm64-ort", None, "--sandbox", "off")
    crash = t["test/arm64-crash"]
    assert crash["status"] == "run-error" and "emulated ARM64 process died" in crash["error"], crash
    for tid in ("mobile/arm64-tflite", "mobile/arm64-ort"):
        assert t[tid]["status"] == "pass", (t[tid]["error"], t[tid]["details"].get("log_tail"))
        assert t[tid]["details"]["shared_emulator"] is True
    assert not _emulators() - before, "an emulated process outlived its check"


@pytest.fixture(scope="module")
def ort_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("arm64-svc")
    from portability.targets.mobile import ORT_CHAIN

    model = conv_model(d / "conv.onnx")
    feeds = {"x": np.random.default_rng(3).random((1, 3, 5, 7), dtype=np.float32)}
    return convert(model, ORT_CHAIN, d / "cache"), feeds, reference(model, feeds)["y"]


def _runtime(endpoint: str | None, art):
    from portability.runtimes.arm64 import Arm64Ort

    rt = Arm64Ort()
    rt.services = {"arm64": endpoint} if endpoint else {}
    rt.load(art)
    return rt


@needs_emulator
def test_the_server_outlives_a_killed_child_and_serves_the_next(ort_model, scratch, monkeypatch):
    from portability.core.errors import RunError
    from portability.mobile.arm64_service import Arm64Service

    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    art, feeds, want = ort_model
    before, svc, rts = _emulators(), Arm64Service(), []
    try:
        lease = svc.lease(None)
        a, b = _runtime(lease.endpoint, art), _runtime(lease.endpoint, art)
        rts += [a, b]
        assert a._reply["pid"] != b._reply["pid"] != lease.proc.pid  # one emulated child each
        os.kill(a._reply["pid"], signal.SIGKILL)
        with pytest.raises(RunError, match="emulated ARM64 process died"):
            a.infer(feeds)
        np.testing.assert_allclose(b.infer(feeds)["y"], want, atol=1e-5)
        c = _runtime(lease.endpoint, art)  # after the crash: the same server forks a fresh child
        rts.append(c)
        np.testing.assert_allclose(c.infer(feeds)["y"], want, atol=1e-5)
        assert lease.alive() and svc.launches == 1 and c.details()["shared_emulator"] is True
        svc.release(lease)
    finally:
        for rt in rts:
            rt.close()
        svc.close()
        svc.close()  # idempotent
    assert not _emulators() - before
    assert not list(scratch.glob("portability-arm64-*"))


@needs_emulator
def test_an_unwell_server_is_replaced_and_a_target_alone_runs_its_own(ort_model, scratch, monkeypatch):
    from portability.mobile.arm64_service import Arm64Service

    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    art, feeds, want = ort_model
    before, svc = _emulators(), Arm64Service()
    try:
        first = svc.lease(None)
        svc.release(first, unwell=True)  # its target hung or crashed: no one uses it, it stops now
        assert not first.alive() and not Path(first.folder).exists()
        second = svc.lease(None)
        assert second is not first and second.alive() and svc.launches == 2
        svc.release(second)
    finally:
        svc.close()
    alone = _runtime(None, art)  # no service (a worker run alone): an emulated process of its own
    try:
        np.testing.assert_allclose(alone.infer(feeds)["y"], want, atol=1e-5)
        assert alone.details()["shared_emulator"] is False and alone.proc is not None
    finally:
        alone.close()
    assert not _emulators() - before


def test_a_server_that_cannot_start_is_a_runtime_error_once(scratch, monkeypatch):
    """No emulator needed: a stand-in that exits at once. The check then runs its targets without it."""
    from portability.mobile.arm64_service import Arm64Service

    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(arm64, "status", lambda root=None: (True, "ready"))
    starts = scratch / "starts"
    script = f"echo start >> {starts}; echo no runtimes here >&2; exit 3"
    monkeypatch.setattr(arm64, "command", lambda root=None: (["/bin/sh", "-c", script, "--"], {}))
    svc = Arm64Service()
    with pytest.raises(RuntimeError, match="exited at start .code 3.: no runtimes here"):
        svc.lease(None)
    with pytest.raises(RuntimeError, match="code 3"):
        svc.lease(None)  # remembered: not tried again for every target
    assert starts.read_text().count("start") == 1
    svc.close()
    assert not list(scratch.glob("portability-arm64-*"))


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="bytecode is written by a Python 3.11 only")
def test_the_emulated_python_gets_bytecode_once_with_its_own_file_names(tmp_path, monkeypatch):
    import marshal

    monkeypatch.setenv("PORTABILITY_ARM64_DIR", str(tmp_path))
    lib = tmp_path / "rootfs/usr/lib/python3.11"
    lib.mkdir(parents=True)
    (lib / "mod.py").write_text("X = 1\n")
    (lib / "broken.py").write_text("def (:\n")  # as in the standard library's test data: the rest still compiles
    assert arm64.compile_bytecode() is True
    pyc = lib / "__pycache__/mod.cpython-311.pyc"
    assert marshal.loads(pyc.read_bytes()[16:]).co_filename == "/usr/lib/python3.11/mod.py"
    assert not (lib / "__pycache__/broken.cpython-311.pyc").exists()
    pyc.unlink()
    assert arm64.compile_bytecode() is True  # the marker: not compiled again
    assert not pyc.exists()
