"""Another account of the machine reaches nothing of a check's browser: no TCP port of the browser's process
tree, nor of the process that shares it, answers a DevTools request, and its DevTools socket refuses that
account. The other account is a real one: a process run with ``setpriv`` under an unused uid."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import psutil
import pytest

from test_web import needs_browser

pytestmark = [pytest.mark.web, needs_browser]

OTHER_UID = 4321
#: the system's interpreter (another uid cannot read a per-user Python such as one under /root)
SYSTEM_PYTHON = "/usr/bin/python3"

#: what the other account tries on every port: the DevTools HTTP endpoints, then the WebSocket upgrade
PROBE = r"""
import http.client, json, socket, sys
found = []
for port in json.loads(sys.argv[1]):
    for path in ("/json/version", "/json/list", "/devtools/browser"):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
            c.request("GET", path, headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                            "Sec-WebSocket-Version": "13"} if path == "/devtools/browser" else {})
            r = c.getresponse()
            body = r.read(4096).decode("latin-1")
            if r.status in (101, 200) or "webSocketDebuggerUrl" in body or "Browser" in body:
                found.append([port, path, r.status])
        except OSError:
            pass
sock_path = sys.argv[2]
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    found.append([sock_path, "connected", 0])
except OSError as e:
    pass
print(json.dumps({"found": found, "probed": len(json.loads(sys.argv[1]))}))
"""


def _as_other_user(*argv: str) -> subprocess.CompletedProcess:
    if os.getuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PYTHON):
        pytest.skip("needs root, setpriv and the system's python3 to act as another account")
    return subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=120, cwd="/")


def _listening_ports(pids: set[int]) -> list[int]:
    return sorted({c.laddr.port for c in psutil.net_connections("tcp")
                   if c.status == psutil.CONN_LISTEN and c.pid in pids})


def test_no_port_of_the_shared_browser_answers_devtools_and_its_socket_refuses_another_user(tmp_path):
    from portability.web.cdp import Connection
    from portability.web.service import KeepingChromium

    chromium = KeepingChromium()
    try:
        # a check in progress: a page of its own, its harness at a URL the other account must not learn
        conn = Connection(chromium.endpoint.partition("#")[0])
        ctx = conn.call("Target.createBrowserContext", {"disposeOnDetach": True}, timeout=30)["browserContextId"]
        conn.call("Target.createTarget", {"url": "about:blank", "browserContextId": ctx}, timeout=30)
        tree = {chromium.pid, os.getpid()} | {p.pid for p in psutil.Process(chromium.pid).children(recursive=True)}
        ports = _listening_ports(tree)
        assert ports, "the kept pages' server listens on a loopback port of this process"
        # the owner's own socket works; the other account's attempt is refused by the folder's mode
        assert conn.call("Browser.getVersion", timeout=30)["product"].startswith(("Chrome", "HeadlessChrome"))
        out = _as_other_user(SYSTEM_PYTHON, "-I", "-c", PROBE, json.dumps(ports),
                             chromium.endpoint.partition("#")[0].removeprefix("unix:"))
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result == {"found": [], "probed": len(ports)}
        conn.close()
    finally:
        chromium.stop()


def test_the_browser_is_started_without_a_debugging_port():
    from portability.web.chromium import Chromium

    chromium = Chromium()
    try:
        cmdlines = [" ".join(p.cmdline()) for p in [psutil.Process(chromium.pid)]
                    + psutil.Process(chromium.pid).children(recursive=True)]
        assert any("--remote-debugging-pipe" in c for c in cmdlines)
        assert not any("--remote-debugging-port" in c or "--remote-debugging-address" in c for c in cmdlines)
        tree = {chromium.pid} | {p.pid for p in psutil.Process(chromium.pid).children(recursive=True)}
        assert _listening_ports(tree) == []
        assert oct(os.stat(chromium.profile).st_mode & 0o777) == "0o700"
    finally:
        chromium.stop()


def test_the_browser_reads_no_file_but_the_systems_and_its_profile(tmp_path):
    """Confined by Landlock like every process that runs a model: a page that reaches for one of the user's
    files (``file://``) gets an error page, not the file."""
    from portability.core.sandbox import status
    from portability.web.browser import Browser, PageError
    from portability.web.service import BrowserService

    if not status()[0]:
        pytest.skip(f"no OS sandbox here: {status()[1]}")
    secret = tmp_path / "secret.txt"
    secret.write_text("the owner's secret")
    svc = BrowserService()
    try:
        br = Browser(endpoint=svc.lease(False).endpoint).start()
        try:
            with pytest.raises(PageError, match="ERR_ACCESS_DENIED"):
                br.new_page(secret.as_uri())
            assert "the owner's secret" not in br.call("() => document.body ? document.body.innerText : ''")
        finally:
            br.close()
    finally:
        svc.close()
