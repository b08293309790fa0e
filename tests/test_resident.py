"""The resident session: checks lease its browsers (and emulator) instead of starting their own; it stops
when idle or asked; a check that cannot reach it does without and says so; killed with SIGKILL during a check,
it costs that check's running targets a clear error (never a hang) and the next check starts a new one."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, by_id, check_json, run_cli

pytestmark = [pytest.mark.web]

WEB = "server/ort-cpu,web/ort-wasm,web/tfjs-cpu"
#: the test doubles' targets (``doubles.py``)
DOUBLES = {"PORTABILITY_PLUGINS": "doubles"}


def _web_missing() -> str | None:
    from portability.runtimes.ort_web import OrtWeb

    a = OrtWeb.availability()
    return None if a.ok else f"{a.reason} (fix: {a.hint})"


needs_browser = pytest.mark.skipif(_web_missing() is not None, reason=f"web stack missing: {_web_missing()}")


@pytest.fixture
def own(tmp_path, monkeypatch):
    """A resident session of this test's own (its socket in the test's folder), stopped at the end."""
    from portability.resident import client

    folder = Path(tempfile.mkdtemp(prefix="res-"))  # the user's alone (0700), and a short socket path
    sock = folder / "serve.sock"
    monkeypatch.setenv(client.SOCKET_ENV, str(sock))
    monkeypatch.setenv(client.SWITCH, "auto")
    yield sock
    try:
        client.request("stop", sock)
    except client.Unreachable:
        pass
    shutil.rmtree(folder, ignore_errors=True)


def _status(sock: Path, memory: bool = True) -> dict:
    from portability.resident import client

    return client.request("status", sock, **({"memory": True} if memory else {}))


@needs_browser
def test_checks_share_the_resident_browser(tmp_path, own):
    first = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", WEB, "--runs", "3", "--no-history")
    s1 = _status(own)
    second = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", WEB, "--runs", "3", "--no-history")
    s2 = _status(own)
    for r in (first, second):
        t = by_id(r)
        assert all(t[i]["status"] == "pass" for i in WEB.split(",")), {i: t[i]["error"] for i in t}
        assert not any("resident" in n for n in r["notes"])
    assert s1["pid"] == s2["pid"]
    browsers = [s for s in s2["services"] if s["provider"] == "browser"]
    assert browsers and browsers[0]["launches"] == 1, s2  # the second check started no browser
    assert s2["served"] >= s1["served"] + 2 and s2["leases"] == 0
    mem = s2["memory_mb"]  # the tree's memory, with a browser in it: more than the server process alone
    assert mem["processes"] >= 3 and mem["proportional"] >= mem["unique"] > 50, mem
    # the status a check asks for (whether the session runs) reads no process's memory: that takes a tenth of a
    # second or more with browsers in the tree, while the check's first targets wait for their leases
    assert "memory_mb" not in _status(own, memory=False)


@needs_browser
def test_unreachable_resident_session_falls_back_and_says_so(tmp_path, monkeypatch):
    from portability.resident import client

    monkeypatch.setenv(client.SOCKET_ENV, "/proc/no-such-folder/serve.sock")  # no process can listen there
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "server/ort-cpu,web/ort-wasm", "--runs", "2",
                   "--no-history")
    assert by_id(r)["web/ort-wasm"]["status"] == "pass"
    assert any("resident session could not be used" in n for n in r["notes"]), r["notes"]


@needs_browser
def test_sigkill_mid_check_costs_running_targets_a_clear_error_and_the_next_check_starts_anew(tmp_path, own):
    out = tmp_path / "killed.json"
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-m", "portability", "check", str(FIXTURES / "lenet.onnx"), "--targets",
                             "web/ort-wasm,web/tfjs-cpu,web/tfjs-wasm,web/litert-js", "--runs", "200", "--jobs", "4",
                             "--no-history", "--json", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    pid = None
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            st = _status(own)
        except Exception:
            time.sleep(0.1)
            continue
        if st["leases"] >= 1:
            pid = st["pid"]
            break
        time.sleep(0.1)
    assert pid, "no target ever leased a browser"
    os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)  # never a hang
    assert proc.returncode in (0, 1), stderr[-3000:]
    r = json.loads(out.read_text())
    hit = [t for t in r["targets"] if t["status"] != "pass"]
    assert hit, "killing the browser's owner cost no target anything"
    for t in hit:
        assert "resident session" in (t["error"] or ""), (t["id"], t["status"], t["error"])
    # the next check starts a new resident session and passes
    again = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "server/ort-cpu,web/ort-wasm", "--runs", "2",
                       "--no-history")
    assert by_id(again)["web/ort-wasm"]["status"] == "pass"
    assert _status(own)["pid"] != pid


def test_checks_fork_their_workers_from_the_resident_sessions_pools(tmp_path, own):
    """A check that finds no resident session forks its own workers (it waits for no session to start) and starts
    one at its end, whose zygotes start then: the plain one, and the one that imported TensorFlow for the targets
    that use it. The workers of the next checks fork from those (a warm ``server/tf`` pays no TensorFlow import)."""
    import psutil

    def check():
        return check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "test/echo,test/echo-tf", "--runs", "2",
                          "--no-history", env=DOUBLES)

    first = by_id(check())
    deadline, pools = time.monotonic() + 120, {}
    while len(pools) < 2 and time.monotonic() < deadline:  # the session the first check started, warming its pools
        try:
            pools = {p["flavour"]: p["pid"] for p in _status(own)["worker_pools"]}
        except Exception:
            pass
        time.sleep(0.2)
    assert set(pools) == {"plain", "tensorflow"}, pools
    for t in ("test/echo", "test/echo-tf"):  # its own zygote's (one check alone: TensorFlow imported by the worker)
        assert first[t]["details"]["echo"]["ppid"] not in pools.values() and not first[t]["details"]["echo"]["tensorflow"]
    reports = [check() for _ in range(2)]
    for r in reports:
        t = by_id(r)
        echo, echo_tf = t["test/echo"]["details"]["echo"], t["test/echo-tf"]["details"]["echo"]
        assert echo["ppid"] == pools["plain"] and echo["tensorflow"] is False
        assert echo_tf["ppid"] == pools["tensorflow"] and echo_tf["tensorflow"] is True
    for pid in pools.values():  # the resident session's own children, one thread each between forks
        z = psutil.Process(pid)
        assert z.ppid() == _status(own)["pid"] and z.num_threads() == 1


def test_a_check_killed_with_sigkill_leaves_no_worker_of_the_resident_pool_behind(tmp_path, own):
    """The resident session's zygote forked the check's workers: when the check dies, it stops them (nobody is left
    to read their results), rather than letting them run on to their own time limits."""
    import psutil

    assert run_cli("serve", env=DOUBLES).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "portability", "check", str(FIXTURES / "mlp.onnx"), "--targets",
                             "test/hang", "--timeout", "600", "--no-history"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=dict(os.environ, **DOUBLES))
    deadline, hung = time.monotonic() + 120, None
    while hung is None and time.monotonic() < deadline and proc.poll() is None:
        pools = {p["flavour"]: p["pid"] for p in _status(own).get("worker_pools", [])} if own.exists() else {}
        kids = psutil.Process(pools["plain"]).children() if "plain" in pools else []
        hung = next((k for k in kids if _cwd(k).endswith("test__hang")), None)
        time.sleep(0.2)
    assert hung is not None, "test/hang's worker never started from the resident pool"
    time.sleep(1)  # well into its hang
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    hung.wait(timeout=10)  # psutil.TimeoutExpired: it ran on
    assert not hung.is_running()


def _cwd(p) -> str:
    import psutil

    try:
        return p.cwd()
    except psutil.Error:
        return ""


def test_serve_start_status_idle_stop(tmp_path, own):
    p = run_cli("serve", "--idle", "60")
    assert p.returncode == 0 and "resident session pid" in p.stdout, p.stderr
    st = json.loads(run_cli("serve", "--status", "--json").stdout)
    assert st["running"] and st["idle_s"] == 60 and oct(own.stat().st_mode & 0o777) == "0o600"
    assert st["memory_mb"]["unique"] > 0 and "MB unique" in run_cli("serve", "--status").stdout
    p = run_cli("serve", "--stop")
    assert p.returncode == 0 and "stopped" in p.stdout
    assert run_cli("serve", "--status").returncode == 1 and not own.exists()
    # an idle session stops by itself
    run_cli("serve", "--idle", "1")
    deadline = time.monotonic() + 20
    while own.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not own.exists(), "an idle resident session kept running"


def test_a_folder_others_can_open_is_refused(tmp_path, monkeypatch):
    from portability.resident import client

    shared = tmp_path / "xdg"
    (shared / "portability").mkdir(parents=True)
    os.chmod(shared / "portability", 0o755)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(shared))
    with pytest.raises(client.Unreachable, match="not this user's own folder"):
        client.runtime_dir()


@needs_browser
def test_an_idle_session_lets_go_of_its_pools_and_kept_pages_and_the_next_check_makes_them_again(tmp_path, own):
    """After ``--trim`` seconds without a check the resident session lets go of its worker pools and the browsers'
    idle kept pages (most of its memory), keeping the browsers themselves; ``serve --status`` says so; the next
    check starts them again and passes as the first did."""
    assert run_cli("serve", "--trim", "2").returncode == 0
    targets = "server/ort-cpu,web/ort-wasm,web/tfjs-wasm"
    first = by_id(check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", targets, "--no-history"))
    deadline, before = time.monotonic() + 60, _status(own)
    while not before["worker_pools"] and time.monotonic() < deadline:  # the pools the check warmed, starting
        time.sleep(0.5)
        before = _status(own)
    assert before["worker_pools"] and before["trimmed"] is None, before
    st = before
    while not (st.get("trimmed") or {}).get("pools") and time.monotonic() < deadline:
        time.sleep(0.5)  # asked more often than the trim's 2 s: asking for the status is no check's activity
        st = _status(own)
    assert st["trimmed"]["pools"] >= 1 and st["trimmed"]["pages"] >= 1, st
    assert st["worker_pools"] == [] and st["memory_mb"]["unique"] < before["memory_mb"]["unique"], (before, st)
    browsers = [[s for s in x["services"] if s["provider"] != "pool"] for x in (before, st)]
    assert browsers[0] and browsers[0] == browsers[1]  # the browsers stay, started once
    assert "let go of" in run_cli("serve", "--status").stdout
    again = by_id(check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", targets, "--no-history"))
    assert {t: r["status"] for t, r in again.items()} == {t: r["status"] for t, r in first.items()} == dict.fromkeys(
        targets.split(","), "pass")
    assert _status(own)["trimmed"] is None
