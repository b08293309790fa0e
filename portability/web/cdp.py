"""A minimal Chrome DevTools Protocol client on the standard library alone.

``WebSocket`` is an RFC 6455 client (the HTTP Upgrade handshake, masked client frames, fragmented
messages, ping / pong, close) good for the loopback DevTools socket; ``Connection`` sends CDP commands
over it and reads replies and events (flat sessions: every page session shares the browser's socket).
Single-threaded: events are handed to ``on_event`` while a command waits for its reply.
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import itertools
import json
import os
import socket
import struct
import time
from typing import Any, Callable
from urllib.parse import urlsplit

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONNECT_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 30.0
RECV_CHUNK = 1 << 20
#: opcodes
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class ConnectionClosed(ConnectionError):
    """The other end closed the WebSocket (or its TCP connection)."""


class CDPError(Exception):
    """A command's error reply."""

    def __init__(self, method: str, error: dict[str, Any]):
        super().__init__(f"{method}: {error.get('message', error)}")
        self.code = error.get("code")


def browser_ws_url(endpoint: str) -> str:
    """The browser's DevTools WebSocket address from its HTTP endpoint (``http://127.0.0.1:PORT``)."""
    u = urlsplit(endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=CONNECT_TIMEOUT_S)  # never through a proxy
    try:
        conn.request("GET", "/json/version")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise ConnectionError(f"{endpoint}/json/version: HTTP {resp.status}")
    finally:
        conn.close()
    return json.loads(body)["webSocketDebuggerUrl"]


def _mask(data: bytes, key: bytes) -> bytes:
    if not data:
        return data
    n = len(data)
    full = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(full, "little")).to_bytes(n, "little")


class WebSocket:
    """``send_text`` / ``recv`` (the next text or binary message, ``None`` on timeout) / ``close``."""

    def __init__(self, url: str, timeout: float = CONNECT_TIMEOUT_S):
        u = urlsplit(url)
        if u.scheme != "ws":
            raise ValueError(f"only ws:// addresses are supported: {url}")
        self.sock = socket.create_connection((u.hostname, u.port or 80), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self._frags: list[bytes] = []
        self._frag_op = TEXT
        self.closed = False
        try:
            self._handshake(u.netloc, (u.path or "/") + (f"?{u.query}" if u.query else ""), timeout)
        except BaseException:
            self.sock.close()
            raise

    def _handshake(self, host: str, path: str, timeout: float) -> None:
        key = base64.b64encode(os.urandom(16))
        self.sock.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                          % (path.encode(), host.encode(), key))
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self._buf:
            self._fill(deadline)
        head, _, rest = bytes(self._buf).partition(b"\r\n\r\n")
        self._buf = bytearray(rest)
        status, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        accept = base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode()
        if status.split()[1:2] != ["101"] or headers.get("sec-websocket-accept") != accept:
            raise ConnectionError(f"WebSocket handshake refused: {status}")

    # -- frames --------------------------------------------------------------------------------------
    def _fill(self, deadline: float | None) -> None:
        """Read what the socket has into the buffer (waiting at most until ``deadline``)."""
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
        else:
            self.sock.settimeout(None)
        try:
            chunk = self.sock.recv(RECV_CHUNK)
        except socket.timeout:
            raise TimeoutError from None
        if not chunk:
            self.closed = True
            raise ConnectionClosed("the DevTools connection closed")
        self._buf += chunk

    def _frame(self, deadline: float | None) -> tuple[bool, int, bytes]:
        """The next whole frame (fin, opcode, payload); a partial one stays buffered on timeout."""
        while True:
            frame = self._parse()
            if frame is not None:
                return frame
            self._fill(deadline)

    def _parse(self) -> tuple[bool, int, bytes] | None:
        """Take one whole frame off the buffer, or ``None`` while it is incomplete."""
        buf = self._buf
        if len(buf) < 2:
            return None
        n, head = buf[1] & 0x7F, 2
        if n >= 126:
            head = 4 if n == 126 else 10
            if len(buf) < head:
                return None
            n = int.from_bytes(buf[2:head], "big")
        key_at, head = head, head + (4 if buf[1] & 0x80 else 0)
        if len(buf) < head + n:
            return None
        payload = bytes(buf[head:head + n])
        if head > key_at:  # servers do not mask; unmask anyway if one does
            payload = _mask(payload, bytes(buf[key_at:head]))
        fin, op = bool(buf[0] & 0x80), buf[0] & 0x0F
        del buf[:head + n]
        return fin, op, payload

    def _send_frame(self, op: int, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x80 | op])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        key = os.urandom(4)
        self.sock.settimeout(SEND_TIMEOUT_S)
        self.sock.sendall(head + key + _mask(payload, key))

    # -- messages ------------------------------------------------------------------------------------
    def send_text(self, text: str) -> None:
        if self.closed:
            raise ConnectionClosed("the DevTools connection is closed")
        self._send_frame(TEXT, text.encode())

    def recv(self, timeout: float | None = None) -> str | bytes | None:
        """The next data message (text as str); ``None`` when ``timeout`` passes first. Pings are answered."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fin, op, payload = self._frame(deadline)
            except TimeoutError:
                return None
            if op == PING:
                self._send_frame(PONG, payload)
            elif op == CLOSE:
                self._close_reply(payload)
            elif op in (TEXT, BINARY, CONT):
                if op != CONT:
                    self._frags, self._frag_op = [], op
                self._frags.append(payload)
                if fin:
                    data, self._frags = b"".join(self._frags), []
                    return data.decode() if self._frag_op == TEXT else data

    def _close_reply(self, payload: bytes) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._send_frame(CLOSE, payload[:2])
            except OSError:
                pass
        raise ConnectionClosed("the DevTools connection closed" + (f" ({payload[2:].decode(errors='replace')})"
                                                                     if len(payload) > 2 else ""))

    def close(self, wait_s: float = 0.5) -> None:
        """Send a close frame, wait briefly for the reply, close the socket; never raises."""
        try:
            if not self.closed:
                self.closed = True
                self._send_frame(CLOSE, struct.pack("!H", 1000))
                deadline = time.monotonic() + wait_s
                while self._frame(deadline)[1] != CLOSE:
                    pass
        except (OSError, TimeoutError):
            pass
        finally:
            self.sock.close()


class Connection:
    """CDP over one WebSocket: ``call`` a command and get its result; events go to ``on_event(message)``
    (``message["sessionId"]`` names the page session, absent for the browser's own)."""

    def __init__(self, ws_url: str, on_event: Callable[[dict[str, Any]], None] | None = None):
        self.ws = WebSocket(ws_url)
        self.on_event = on_event
        self._ids = itertools.count(1)
        self._pending: dict[int, str] = {}
        self._replies: dict[int, dict[str, Any]] = {}

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> int:
        """Send a command without waiting; ``wait(id)`` gets its result."""
        cid = next(self._ids)
        msg: dict[str, Any] = {"id": cid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._pending[cid] = method
        self.ws.send_text(json.dumps(msg))
        return cid

    def wait(self, cid: int, timeout: float | None = None, abort: Callable[[], None] | None = None) -> dict[str, Any]:
        """The result of command ``cid``; ``abort()`` runs after each message and may raise to stop waiting."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while cid not in self._replies:
                self._pump(deadline, abort)
        except TimeoutError:
            raise TimeoutError(f"{self._pending.get(cid)}: no reply within {timeout} s") from None
        method = self._pending.pop(cid, "?")
        reply = self._replies.pop(cid)
        if "error" in reply:
            raise CDPError(method, reply["error"])
        return reply.get("result", {})

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float | None = None, abort: Callable[[], None] | None = None) -> dict[str, Any]:
        return self.wait(self.send(method, params, session), timeout, abort)

    def wait_event(self, match: Callable[[dict[str, Any]], bool], timeout: float,
                   abort: Callable[[], None] | None = None) -> dict[str, Any]:
        """The next event ``match`` accepts (each event still goes to ``on_event``)."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self._pump(deadline, abort)
            if "method" in msg and match(msg):
                return msg

    def _pump(self, deadline: float | None, abort: Callable[[], None] | None) -> dict[str, Any]:
        """Read one message: a reply is kept for its waiter, an event goes to ``on_event``."""
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        raw = self.ws.recv(left)
        if raw is None:
            raise TimeoutError
        msg = json.loads(raw)
        if "id" in msg:
            if msg["id"] in self._pending:
                self._replies[msg["id"]] = msg
        elif self.on_event is not None:
            self.on_event(msg)
        if abort is not None:
            abort()
        return msg

    def close(self) -> None:
        self.ws.close()
