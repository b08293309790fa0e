from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
TESTS = Path(__file__).resolve().parent

# every process the tests start (the CLI, its zygote and workers) can import the test doubles
# (``doubles.py``); a test asks for their targets with PORTABILITY_PLUGINS=doubles
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(filter(None, [str(TESTS), *os.environ.get("PYTHONPATH", "").split(os.pathsep)])))


from portability.core.dirs import tools_root  # noqa: E402


def _mxnet_venv() -> str:
    from portability.core import mxnet_env

    return str(mxnet_env.venv_dir())


#: MXNet's environment as provisioned for the user (found before the cache is made private below)
MXNET_VENV = _mxnet_venv()
#: the converters provisioned apart (onnx2tf 2.x, litert-torch), likewise
TOOLS_DIR = str(tools_root())


@pytest.fixture(scope="session", autouse=True)
def _resident_session(tmp_path_factory):
    """One resident session (its browsers and ARM64 emulator, ``portability.resident``) for the whole test
    session: every check the tests run leases from it, and it stops when the tests end. Started here, with the
    session's own environment, so no test's temporary settings become its own."""
    from portability.resident import client

    sock = tmp_path_factory.getbasetemp() / "serve.sock"
    if len(str(sock)) > 100:  # a Unix socket's path has room for 107 bytes
        sock = Path(tempfile.mkdtemp(prefix="portability-tests-")) / "serve.sock"  # a folder of its own
    os.environ[client.SOCKET_ENV] = str(sock)
    if client.mode() == "auto":
        try:
            client.start(sock, idle_s=3600)
        except client.Unreachable as e:  # the checks then start their own services, and say so
            import warnings

            warnings.warn(f"no resident session for the tests: {e}")
    yield sock
    try:
        client.request("stop", sock)
    except client.Unreachable:
        pass


@pytest.fixture
def own_services(monkeypatch):
    """The check starts and stops its own services (browsers, emulator), as without a resident session."""
    monkeypatch.setenv("PORTABILITY_RESIDENT", "off")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Each test session gets its own artifact cache, so tests never depend on the user's (MXNet's
    provisioned environment and the converters provisioned apart excepted: they are tools, not cache entries)."""
    # each test process its own (with pytest-xdist too): the study's resumable state lives there as well, and a
    # test must not resume rows another process's test is writing
    monkeypatch.setenv("PORTABILITY_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setenv("PORTABILITY_MXNET_VENV", MXNET_VENV)
    monkeypatch.setenv("PORTABILITY_TOOLS_DIR", TOOLS_DIR)


@pytest.fixture(autouse=True)
def _private_history(tmp_path_factory, monkeypatch):
    """Checks the tests run record their history in the session's temp folder, never the user's."""
    monkeypatch.setenv("PORTABILITY_DATA_DIR", str(tmp_path_factory.getbasetemp() / "data"))


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "portability", *args], capture_output=True, text=True,
                          env=e, cwd=cwd or ROOT, timeout=timeout)


def check_json(tmp_path: Path, model: Path | str, *args: str, env: dict | None = None, expect_rc: int | None = 0) -> dict:
    out = tmp_path / "report.json"
    p = run_cli("check", str(model), "--json", str(out), *args, env=env)
    if expect_rc is not None:
        assert p.returncode == expect_rc, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return json.loads(out.read_text())


def by_id(report: dict) -> dict[str, dict]:
    return {t["id"]: t for t in report["targets"]}


RUNTIME_MARKERS = ("web", "mobile", "arm64", "mxnet")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With PORTABILITY_REQUIRE_RUNTIMES=1 (CI, after the full setup) a runtime test that skips fails:
    there a missing runtime is a broken install, not an absent option."""
    outcome = yield
    rep = outcome.get_result()
    if (rep.skipped and os.environ.get("PORTABILITY_REQUIRE_RUNTIMES") == "1"
            and any(item.get_closest_marker(m) for m in RUNTIME_MARKERS)):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"runtime required here (PORTABILITY_REQUIRE_RUNTIMES=1) but the test skipped: {reason}"


def _slow_tests() -> set[str]:
    """The tests ``tests/slow.txt`` lists (``scripts/test_tiers.py`` makes it from a full run's timings)."""
    f = TESTS / "slow.txt"
    if not f.is_file():
        return set()
    return {ln.split("#", 1)[0].strip() for ln in f.read_text().splitlines() if ln.split("#", 1)[0].strip()}


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` what ``tests/slow.txt`` lists: ``-m "not slow"`` is the fast tier."""
    slow = _slow_tests()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
