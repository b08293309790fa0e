"""The resident session against what is not its user's own: the folder it is started from, requests that are not
the protocol's, a process of another user at its socket, links planted where it makes its files, a runtime
folder another user took first. Each case gets a one-line answer or error, and the session serves on."""
from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import run_cli

OTHER_UID = 4321
as_root = pytest.mark.skipif(os.getuid() != 0, reason="making a file another user's needs root")


@pytest.fixture
def folder():
    """A private folder (0700) with a short path, for a socket."""
    d = Path(tempfile.mkdtemp(prefix="res-hostile-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def spawned(folder, monkeypatch):
    """The socket of a resident process of this test's own, stopped at the end."""
    from portability.resident import client

    sock = folder / "serve.sock"
    monkeypatch.setenv(client.SOCKET_ENV, str(sock))
    yield sock
    try:
        client.request("stop", sock)
    except client.Unreachable:
        pass


@pytest.fixture
def served(folder, monkeypatch):
    """A resident session served by a thread of this process (a request line is waited for 0.5 s)."""
    from portability.resident import protocol
    from portability.resident.server import Resident

    monkeypatch.setattr(protocol, "REQUEST_TIMEOUT_S", 0.5)
    r = Resident(folder / "serve.sock", idle_s=600)
    t = threading.Thread(target=r.serve, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not r.path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    yield r.path
    r._stop.set()
    t.join(10)


def _raw(sock: Path, data: bytes, timeout: float = 10.0) -> dict:
    """Send ``data`` as it is and read the one-line answer."""
    import json

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(sock))
        s.sendall(data)
        line = s.makefile("rb").readline()
    assert line, "the connection ended without an answer"
    return json.loads(line)


def _one_line_error(p: subprocess.CompletedProcess, *fragments: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr and all(f in lines[0] for f in fragments), p.stderr


# --- 1. started clean -------------------------------------------------------------------------------------

def test_the_resident_process_imports_nothing_of_the_folder_it_is_started_from(tmp_path, spawned, monkeypatch):
    from portability.resident import client

    cwd, marks = tmp_path / "work", tmp_path / "marks"
    cwd.mkdir()
    marks.mkdir()
    for name in ("ctypes", "json", "socket", "selectors"):
        (cwd / f"{name}.py").write_text(f"open({str(marks / name)!r}, 'w').write('imported')\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["."] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    info = client.start(spawned, idle_s=60)
    assert sorted(os.listdir(marks)) == []
    assert os.readlink(f"/proc/{info['pid']}/cwd") == "/"
    assert b"-P" in Path(f"/proc/{info['pid']}/cmdline").read_bytes().split(b"\0")


# --- 2. requests ------------------------------------------------------------------------------------------

BAD = [
    (b"not json\n", "not a JSON line"),
    (b"\xff\xfe\n", "not a JSON line"),
    (b"[1, 2]\n", "not a JSON object"),
    (b'{"op": "shutdown-everything"}\n', "unknown request"),
    (b'{"op": "lease", "provider": "os:getpid"}\n', "unknown provider"),
    (b'{"op": "running", "provider": "portability.mobile.arm64_service:Arm64Service"}\n', "unknown provider"),
    (b'{"op": "running", "provider": "arm64", "mode": "lenient"}\n', "unknown sandbox mode"),
    (b'{"op": "lease", "provider": "arm64", "mode": "off"}\n', "always run sandboxed"),
    (b'{"op": "lease", "provider": "browser", "flavour": [1]}\n', "flavour"),
    (b'{"op": "pool", "flavour": "plain", "env": {"A": 1}}\n', "environment"),
    (b'{"op": "warm", "pools": [1]}\n', "pools"),
]


def test_bad_requests_are_answered_and_the_session_serves_on(served):
    from portability.resident import client

    for data, said in BAD:
        answer = _raw(served, data)
        assert answer["ok"] is False and said in answer["error"], (data, answer)
    status = client.request("status", served)
    assert status["ok"] and status["services"] == [], status  # nothing a request named was imported or started


def test_an_over_long_line_is_refused(served):
    from portability.resident import client, protocol

    answer = _raw(served, b'{"op": "status", "pad": "' + b"x" * protocol.MAX_LINE + b'"}\n')
    assert answer["ok"] is False and f"over {protocol.MAX_LINE} bytes" in answer["error"]
    assert client.request("status", served)["ok"]


def test_a_connection_that_says_nothing_is_answered_in_time(served):
    from portability.resident import client

    t0 = time.monotonic()
    answer = _raw(served, b"", timeout=5)
    assert answer["ok"] is False and "no request within" in answer["error"] and time.monotonic() - t0 < 4
    assert client.request("status", served)["ok"]


def test_a_provider_that_fails_to_start_is_an_answer_not_a_dead_handler(served, monkeypatch):
    from portability.resident import client, protocol

    monkeypatch.setitem(protocol.PROVIDERS, "broken", "portability.no_such_module:Nothing")
    answer = _raw(served, b'{"op": "lease", "provider": "broken"}\n')
    assert answer["ok"] is False and "ModuleNotFoundError" in answer["error"], answer
    assert client.request("status", served)["ok"]


def test_the_providers_resolve_and_every_runtimes_service_is_one_of_them():
    from portability.core.target import load_class
    from portability.resident import protocol
    from portability.targets import registry

    for path in (*protocol.PROVIDERS.values(), protocol.POOL_HOST):
        assert isinstance(load_class(path), type), path
    declared = {cls for t in registry().values() for cls, _ in load_class(t.runtime).providers.values()}
    assert declared and declared <= set(protocol.PROVIDERS.values()), declared - set(protocol.PROVIDERS.values())


def test_a_check_with_the_sandbox_off_or_an_unknown_provider_starts_its_own(folder):
    from portability.resident import client

    arm64 = client.RemoteProvider("portability.mobile.arm64_service:Arm64Service", folder / "none.sock")
    arm64.sandbox = {"mode": "off"}
    with pytest.raises(client.Unreachable, match="always run sandboxed"):
        arm64.lease()
    with pytest.raises(client.Unreachable, match="serves no os:getpid"):
        client.RemoteProvider("os:getpid", folder / "none.sock").lease()


# --- 3. the client checks whom it talks to --------------------------------------------------------------

_FOREIGN = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
os.setresgid({uid}, {uid}, {uid}); os.setgroups([]); os.setresuid({uid}, {uid}, {uid})
s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
c.sendall(b'{{"ok": true, "pid": 1}}\\n')
""".format(uid=OTHER_UID)


@as_root
def test_the_client_refuses_a_process_of_another_user_at_its_socket(folder):
    from portability.resident import client

    sock = folder / "serve.sock"
    proc = subprocess.Popen([sys.executable, "-c", _FOREIGN, str(sock)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(client.Unreachable, match=f"uid {OTHER_UID}"):
            client.request("status", sock)
    finally:
        proc.kill()
        proc.wait()


@as_root
@pytest.mark.parametrize("how", ["open to others", "another user's"])
def test_an_explicit_socket_in_a_folder_not_the_users_own_is_refused(tmp_path, monkeypatch, how):
    from portability.resident import client

    shared = tmp_path / "shared"
    shared.mkdir()
    if how == "open to others":
        os.chmod(shared, 0o755)
    else:
        os.chmod(shared, 0o700)
        os.chown(shared, OTHER_UID, OTHER_UID)
    sock = shared / "serve.sock"
    monkeypatch.setenv(client.SOCKET_ENV, str(sock))
    with pytest.raises(client.Unreachable, match="not this user's own folder"):
        client.request("status", sock)
    with pytest.raises(client.Unreachable, match="not this user's own folder"):
        client.start(sock)
    _one_line_error(run_cli("serve", "--status"), str(shared), "not this user's own folder")
    _one_line_error(run_cli("serve", "--idle", "5"), str(shared))
    assert not sock.exists()


@pytest.mark.parametrize("suffix", [".lock", ".log"])
def test_a_link_planted_for_the_lock_or_the_log_leaves_its_target_alone(tmp_path, spawned, suffix):
    from portability.resident import client

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    link = spawned.with_suffix(suffix)
    link.symlink_to(precious)
    with pytest.raises(client.Unreachable, match="symbolic link"):
        client.start(spawned, idle_s=5)
    _one_line_error(run_cli("serve", "--idle", "5"), str(link), "symbolic link")
    assert precious.read_text() == "keep me\n" and link.is_symlink() and not spawned.exists()


def test_a_link_planted_for_the_pools_to_warm_leaves_its_target_alone(tmp_path, spawned):
    from portability.resident import client

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    spawned.with_suffix(f".warm-{os.getpid()}.json").symlink_to(precious)
    client.warm({}, spawned)  # starts the session in the background, the pools to warm in a file
    deadline = time.monotonic() + 15
    while not client.running(spawned) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.running(spawned)
    assert precious.read_text() == "keep me\n"


def test_the_files_made_beside_the_socket_are_the_users_alone(spawned):
    from portability.resident import client

    client.start(spawned, idle_s=60)
    for suffix in (".lock", ".log"):
        assert oct(spawned.with_suffix(suffix).stat().st_mode & 0o777) == "0o600", suffix


# --- the runtime folder -------------------------------------------------------------------------------------

@as_root
@pytest.mark.parametrize("how", ["another user's", "a link"])
def test_a_runtime_folder_taken_first_gives_way_to_a_private_one(tmp_path, monkeypatch, how):
    from portability.resident import client

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    usual = tmp / f"portability-{os.getuid()}"
    if how == "another user's":
        usual.mkdir(mode=0o700)
        os.chown(usual, OTHER_UID, OTHER_UID)
    else:
        ours = tmp_path / "ours"
        ours.mkdir(mode=0o700)
        usual.symlink_to(ours)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv(client.SOCKET_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    got = client.runtime_dir()
    assert got.parent == tmp and got.name.startswith(f"portability-{os.getuid()}-") and got != usual
    st = got.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o700
    assert client.runtime_dir() == got  # found again by the next check
    env = {"TMPDIR": str(tmp), "XDG_RUNTIME_DIR": ""}
    p = run_cli("serve", "--status", env=env)
    assert p.returncode == 1 and f"({got}/serve-" in p.stdout and "error" not in p.stderr, (p.stdout, p.stderr)


def test_no_runtime_folder_at_all_is_one_clear_error(monkeypatch):
    from portability.resident import client

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", "/proc")
    with pytest.raises(client.Unreachable, match=f"/proc/portability-{os.getuid()}"):
        client.runtime_dir()
