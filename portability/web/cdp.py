"""A minimal Chrome DevTools Protocol client on the standard library alone.

The browser speaks DevTools over a pipe (``--remote-debugging-pipe``), never a TCP port: the process that
started it shares that pipe with its workers through a Unix socket in the browser's private profile folder
(``web/relay.py``). ``Link`` is one client's end of that socket (JSON messages, each ended by a NUL byte, as
on the pipe); ``Connection`` sends CDP commands over it and reads replies and events (flat sessions: every
page session shares the one link). Single-threaded: events are handed to ``on_event`` while a command waits
for its reply.
"""
from __future__ import annotations

import itertools
import json
import os
import socket
import struct
import time
from typing import Any, Callable

CONNECT_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 30.0
RECV_CHUNK = 1 << 20
#: an endpoint is this prefix and the path of the browser's DevTools socket
SCHEME = "unix:"


class ConnectionClosed(ConnectionError):
    """The other end closed the connection."""


class CDPError(Exception):
    """A command's error reply."""

    def __init__(self, method: str, error: dict[str, Any]):
        super().__init__(f"{method}: {error.get('message', error)}")
        self.code = error.get("code")


def socket_path(endpoint: str) -> str:
    """The DevTools socket's path from an endpoint (``unix:/…/devtools``, a ``#fragment`` after it ignored)."""
    if not endpoint.startswith(SCHEME):
        raise ValueError(f"not a DevTools socket endpoint: {endpoint}")
    return endpoint[len(SCHEME):].partition("#")[0]


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


class Link:
    """One connection to a browser's DevTools socket: ``send_text`` / ``recv`` (the next message, ``None`` on
    timeout) / ``close``. It refuses a socket whose other end is not this user's."""

    def __init__(self, endpoint: str, timeout: float = CONNECT_TIMEOUT_S):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._buf = bytearray()
        self.closed = False
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(socket_path(endpoint))
            if peer_uid(self.sock) != os.getuid():
                raise ConnectionError(f"{endpoint}: the DevTools socket belongs to another user")
        except BaseException:
            self.sock.close()
            raise

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

    def send_text(self, text: str) -> None:
        if self.closed:
            raise ConnectionClosed("the DevTools connection is closed")
        self.sock.settimeout(SEND_TIMEOUT_S)
        self.sock.sendall(text.encode() + b"\0")

    def recv(self, timeout: float | None = None) -> str | None:
        """The next message; ``None`` when ``timeout`` passes first (a partial message stays buffered)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        start = 0
        while True:
            end = self._buf.find(b"\0", start)
            if end >= 0:
                msg = bytes(self._buf[:end])
                del self._buf[:end + 1]
                return msg.decode()
            start = len(self._buf)
            try:
                self._fill(deadline)
            except TimeoutError:
                return None

    def close(self) -> None:
        """Close the socket; never raises."""
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


class Connection:
    """CDP over one ``Link``: ``call`` a command and get its result; events go to ``on_event(message)``
    (``message["sessionId"]`` names the page session, absent for the browser's own)."""

    def __init__(self, endpoint: str, on_event: Callable[[dict[str, Any]], None] | None = None):
        self.link = Link(endpoint)
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
        self.link.send_text(json.dumps(msg))
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
        raw = self.link.recv(left)
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
        self.link.close()
