"""The standard-library DevTools client: its WebSocket against a scripted RFC 6455 server (no browser), and
``Connection``'s replies, events and errors over it."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import threading

import pytest

from portability.web.cdp import CDPError, Connection, ConnectionClosed, WebSocket

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _frame(op: int, payload: bytes, fin: bool = True) -> bytes:
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | op])
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


class Peer:
    """One accepted connection of the scripted server: reads masked client frames, writes raw frames."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("client went away")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def handshake(self) -> None:
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(4096)
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        key = next(ln.split(b":", 1)[1].strip() for ln in head.split(b"\r\n") if ln.lower().startswith(b"sec-websocket-key"))
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        self.sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")

    def recv(self) -> tuple[int, bytes]:
        b0, b1 = self._read(2)
        assert b1 & 0x80, "client frames must be masked"
        n = b1 & 0x7F
        if n >= 126:
            n = int.from_bytes(self._read(2 if n == 126 else 8), "big")
        key = self._read(4)
        data = self._read(n)
        return b0 & 0x0F, bytes(c ^ key[i % 4] for i, c in enumerate(data)) if n < 4096 else _unmask(data, key)

    def send(self, raw: bytes) -> None:
        self.sock.sendall(raw)


def _unmask(data: bytes, key: bytes) -> bytes:
    full = (key * (len(data) // 4 + 1))[:len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(full, "big")).to_bytes(len(data), "big")


@pytest.fixture
def server():
    """``(url, run)``: ``run(script)`` serves one connection with ``script(peer)`` in a thread (returned)."""
    lsock = socket.create_server(("127.0.0.1", 0))
    threads, errors = [], []

    def run(script):
        def serve():
            conn, _ = lsock.accept()
            try:
                peer = Peer(conn)
                peer.handshake()
                script(peer)
            except Exception as e:  # surfaced by the test
                errors.append(e)
            finally:
                conn.close()
        threads.append(threading.Thread(target=serve, daemon=True))
        threads[-1].start()
        return threads[-1]

    yield f"ws://127.0.0.1:{lsock.getsockname()[1]}/devtools/browser/x", run
    for t in threads:
        t.join(10)
    lsock.close()
    assert not errors, errors


def test_websocket_reassembles_fragments_answers_pings_and_carries_large_messages(server):
    url, run = server
    big = os.urandom(3 * 2**20).hex()  # 6 MB of text
    seen = {}

    def script(peer):
        seen["hello"] = peer.recv()
        peer.send(_frame(0x1, b"hel", fin=False) + _frame(0x9, b"p!") + _frame(0x0, b"lo", fin=False) + _frame(0x0, b"!"))
        seen["pong"] = peer.recv()
        peer.send(_frame(0x1, big.encode()))
        seen["echo"] = peer.recv()
        peer.send(_frame(0x8, struct.pack("!H", 1000)))
        seen["close"] = peer.recv()

    served = run(script)
    ws = WebSocket(url)
    ws.send_text("hello")
    assert ws.recv(10) == "hello!"
    assert ws.recv(10) == big
    ws.send_text(big[:200_000])
    with pytest.raises(ConnectionClosed):
        ws.recv(10)
    ws.close()
    served.join(10)
    assert seen["hello"] == (0x1, b"hello") and seen["pong"] == (0xA, b"p!")
    assert seen["echo"] == (0x1, big[:200_000].encode()) and seen["close"][0] == 0x8


def test_websocket_recv_times_out_and_keeps_a_partial_frame(server):
    url, run = server
    go = threading.Event()

    def script(peer):
        raw = _frame(0x1, b"x" * 300)
        peer.send(raw[:100])
        go.wait(10)
        peer.send(raw[100:])
        peer.recv()  # the close

    run(script)
    ws = WebSocket(url)
    assert ws.recv(0.2) is None
    go.set()
    assert ws.recv(10) == "x" * 300
    ws.close()


def test_connection_matches_replies_hands_events_over_and_raises_errors(server):
    url, run = server

    def script(peer):
        for _ in range(2):
            msg = json.loads(peer.recv()[1])
            peer.send(_frame(0x1, json.dumps({"method": "Log.entryAdded", "params": {"n": msg["id"]}}).encode()))
            reply = {"result": {"echo": msg["params"]}} if msg["method"] == "Echo" else {"error": {"code": -32000, "message": "nope"}}
            peer.send(_frame(0x1, json.dumps({"id": msg["id"], "sessionId": msg.get("sessionId"), **reply}).encode()))
        peer.recv()  # the close

    run(script)
    events = []
    conn = Connection(url, on_event=events.append)
    assert conn.call("Echo", {"a": [1, 2]}, session="S1", timeout=10) == {"echo": {"a": [1, 2]}}
    with pytest.raises(CDPError, match="Fail: nope"):
        conn.call("Fail", timeout=10)
    conn.close()
    assert [e["params"]["n"] for e in events] == [1, 2]


def test_connection_closed_by_the_peer_is_a_connection_error(server):
    url, run = server
    run(lambda peer: peer.recv())  # reads the command, then drops the socket without replying
    conn = Connection(url)
    with pytest.raises(ConnectionError):
        conn.call("Never", timeout=10)
    conn.close()
