"""``bundle --serve``'s server (``portability/bundle/serve.py``): where it listens, whom it answers, and how it
ends connections; and the command line's checks of ``--host`` before anything is built."""
from __future__ import annotations

import logging
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT, run_cli
from portability.bundle import serve
from portability.bundle.serve import BundleServer

LENET = ROOT / "fixtures" / "lenet.onnx"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.fixture
def site(tmp_path) -> Path:
    (tmp_path / "index.html").write_text("<html>")
    (tmp_path / "big.bin").write_bytes(b"\0" * (32 << 20))
    return tmp_path


@pytest.fixture
def server(site):
    srv = BundleServer(site, timeout_s=0.5).start()
    yield srv
    srv.close()


def _exchange(srv: BundleServer, request: bytes) -> bytes:
    """Everything the server sends for ``request`` until it closes the connection (or 5 s pass)."""
    with socket.socket(srv.httpd.address_family) as s:
        s.settimeout(5)
        s.connect(srv.httpd.server_address)
        s.sendall(request)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got


def _get(srv: BundleServer, path: str = "/", host: str = "127.0.0.1") -> bytes:
    return _exchange(srv, f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())


def test_loopback_by_default(server):
    assert server.loopback and server.url.startswith("http://127.0.0.1:")
    assert _get(server).startswith(b"HTTP/1.1 200")


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_ipv6(site, host):
    srv = BundleServer(site, host).start()
    try:
        assert srv.url.startswith("http://[::1]:") and srv.loopback
        assert _get(srv, host="[::1]").startswith(b"HTTP/1.1 200")
    finally:
        srv.close()


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1", "127.0.0.1:1", "LOCALHOST"])
def test_host_of_this_machine_answered(server, host):
    assert _get(server, host=host).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "192.168.1.5", "localhost.evil.example", ""])
def test_other_hosts_refused_on_loopback(server, host):
    """A page of another site whose name now resolves to 127.0.0.1 (DNS rebinding) sends its own name."""
    got = _get(server, host=host)
    assert got.startswith(b"HTTP/1.1 403") and b"Connection: close" in got and b"<html>" not in got


def test_every_interface_answers_addresses_and_names_only(site):
    srv = BundleServer(site, "0.0.0.0", timeout_s=0.5).start()
    try:
        assert srv.url.startswith("http://0.0.0.0:") and not srv.loopback and srv.every_interface
        for ok in ("192.168.1.5:8000", "127.0.0.1", "localhost", socket.gethostname()):
            assert _get(srv, host=ok).startswith(b"HTTP/1.1 200"), ok
        assert _get(srv, host="evil.example").startswith(b"HTTP/1.1 403")
    finally:
        srv.close()


def test_error_answers_close_the_connection(server):
    """A refused PUT's body is never read as the next request: one answer, then the connection ends."""
    body = b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    got = _exchange(server, b"PUT /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert got.startswith(b"HTTP/1.1 405") and got.count(b"HTTP/1.1") == 1 and b"Connection: close" in got
    got = _exchange(server, b"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 404") and got.count(b"HTTP/1.1") == 1
    got = _exchange(server, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
    assert got.startswith(b"HTTP/1.1 200") and got.count(b"HTTP/1.1") == 1 and b"Connection: close" in got


def test_keep_alive_still_works(server):
    got = _exchange(server, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert got.count(b"HTTP/1.1 200") == 2


@pytest.mark.parametrize("path", ["/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2fetc/passwd", "//etc/passwd"])
def test_paths_outside_refused(server, path):
    assert _get(server, path).startswith(b"HTTP/1.1 404")


def test_unfinished_requests_time_out(server):
    """50 connections that never finish their request: each closed after the read timeout, their threads gone."""
    before = threading.active_count()
    conns = []
    for _ in range(50):
        s = socket.create_connection(server.httpd.server_address[:2])
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: the request never ends
        conns.append(s)
    try:
        deadline = time.monotonic() + 10
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert threading.active_count() <= before
        for s in conns:
            s.settimeout(2)
            assert s.recv(100) == b""  # closed by the server
    finally:
        for s in conns:
            s.close()


def test_connections_beyond_the_cap_closed(site, monkeypatch):
    monkeypatch.setattr(serve, "MAX_CONNECTIONS", 2)
    srv = BundleServer(site, timeout_s=5).start()
    held = [socket.create_connection(srv.httpd.server_address[:2]) for _ in range(2)]
    try:
        time.sleep(0.3)
        with socket.create_connection(srv.httpd.server_address[:2]) as s:
            s.settimeout(3)
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert s.recv(100) == b""
    finally:
        for s in held:
            s.close()
        srv.close()


def test_a_client_gone_mid_answer_is_one_line(server, caplog, capfd):
    with caplog.at_level(logging.INFO, logger="portability.bundle.serve"):
        s = socket.create_connection(server.httpd.server_address[:2])
        s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.recv(1000)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, not a polite close
        s.close()
        deadline = time.monotonic() + 5
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.05)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "went away mid-answer" in lines[0], lines
    assert not any(r.exc_info for r in caplog.records)
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("host, why", [("::1x", "not an address"), ("nonexistent.invalid", "not an address"),
                                        ("", "--host is empty")])
def test_bad_host_refused_before_building(tmp_path, host, why):
    p = run_cli("bundle", str(LENET), "-t", "web", "-o", str(tmp_path / "b"), "--serve", "--host", host, "--no-history")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and why in lines[0], p.stderr
    assert not (tmp_path / "b").exists()


def test_taken_port_refused_before_building(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = run_cli("bundle", str(LENET), "-t", "web", "-o", str(tmp_path / "b"), "--serve", "--port", str(port), "--no-history")
    assert p.returncode == 2 and p.stderr.strip().startswith("error: cannot listen on 127.0.0.1 port"), p.stderr
    assert not (tmp_path / "b").exists()


def _serve_cli(monkeypatch, capsys, tmp_path, *args: str) -> tuple[int, str, str]:
    """``bundle --serve`` run here with the check and bundling stubbed out and serving ended at once."""
    import portability.bundle as bundle_pkg
    from portability.cli.main import main

    fake = SimpleNamespace(report=None, skipped=[], manifest={"targets": [{"id": "web/ort-wasm"}]})
    monkeypatch.setattr(bundle_pkg, "build", lambda *a, **k: fake)

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(BundleServer, "serve_forever", interrupted)
    monkeypatch.setattr(sys, "argv", ["portability", "bundle", str(LENET), "-o", str(tmp_path / "b"), "--serve",
                                      "--no-history", *args])
    with pytest.raises(SystemExit) as e:
        main()
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


def test_cli_prints_the_loopback_url(monkeypatch, capsys, tmp_path):
    rc, out, err = _serve_cli(monkeypatch, capsys, tmp_path)
    assert rc == 0 and out.splitlines()[0].startswith("http://127.0.0.1:") and "warning" not in err, err


def test_cli_warns_of_another_address_and_prints_it(monkeypatch, capsys, tmp_path):
    rc, out, err = _serve_cli(monkeypatch, capsys, tmp_path, "--host", "0.0.0.0")
    assert rc == 0 and out.splitlines()[0].startswith("http://0.0.0.0:"), out
    assert "warning:" in err and "not loopback" in err and "every interface" in err, err
