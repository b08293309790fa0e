"""``portability doctor``: one line per platform, ready or not, what is missing and the command that fixes it (a
command that exists); --json; exit 0 unless --strict; no framework imported."""
from __future__ import annotations

import json
import time

from conftest import run_cli
from test_install import hint_problems, imported, run_hiding

#: a Chromium that is not there: the web platform is not ready, whatever this machine has
NO_BROWSER = {"PORTABILITY_CHROMIUM": "/nonexistent/chromium"}


def _rows(*args: str, env: dict | None = None) -> tuple[int, dict[str, dict]]:
    p = run_cli("doctor", "--json", *args, env=env)
    return p.returncode, {r["platform"]: r for r in json.loads(p.stdout)}


def test_every_platform_has_a_line_and_every_fix_exists():
    t0 = time.monotonic()
    rc, rows = _rows()
    assert rc == 0 and time.monotonic() - t0 < 30
    assert {"server", "web", "tfjs", "mobile", "arm64", "torch", "tensorflow", "gpu", "mxnet"} <= set(rows)
    assert rows["server"]["ready"] is True and rows["server"]["fix"] is None
    missing = {k: r for k, r in rows.items() if not r["ready"]}
    assert all(r["missing"] and r["fix"] for r in missing.values()), missing
    assert {k: hint_problems(r["fix"]) for k, r in missing.items() if hint_problems(r["fix"])} == {}


def test_a_missing_browser_is_said_with_its_fix_and_strict_fails():
    rc, rows = _rows("web", "server", env=NO_BROWSER)
    assert rc == 0 and set(rows) == {"web", "server"}
    web = rows["web"]
    assert web["ready"] is False and "Chromium not found at /nonexistent/chromium" in web["missing"]
    assert "apt-get install -y chromium" in web["fix"] and "portability setup web" in web["fix"]
    p = run_cli("doctor", "--strict", "web", env=NO_BROWSER)
    assert p.returncode == 1 and "web  not ready: web/ort-wasm: Chromium not found" in p.stdout, p.stdout
    assert p.stdout.splitlines()[-1] == "0 of 1 ready"
    assert run_cli("doctor", "--strict", "server").returncode == 0


def test_a_missing_converter_makes_mobile_not_ready_and_nothing_heavy_is_imported():
    p = run_hiding(("sng4onnx",), "doctor", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["platform"]: r for r in json.loads(p.stdout)}
    mobile = rows["mobile"]
    assert not mobile["ready"] and "'sng4onnx' is not installed" in mobile["missing"], mobile
    assert "portability setup mobile" in mobile["fix"] and not hint_problems(mobile["fix"])
    assert imported(p) == "imported:", imported(p)


def test_an_unknown_platform_is_a_usage_error():
    p = run_cli("doctor", "nowhere")
    assert p.returncode == 2 and "unknown platform nowhere (known: server, web" in p.stderr
