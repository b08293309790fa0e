"""One browser's DevTools pipe shared by its clients through a Unix socket only its user can reach.

Chromium started with ``--remote-debugging-pipe`` reads commands on its fd 3 and writes replies and events
on its fd 4, JSON messages each ended by a NUL byte; no TCP port is opened, so no other local user can drive
it (a DevTools port on 127.0.0.1 answers every account of the machine). The process that started it runs
this relay: a socket in the browser's profile folder (0700, the socket 0600, and every accepted peer's uid
checked), where each worker connects as it would have to the port.

The pipe is one DevTools connection, so the relay multiplexes: a client's command ids are renumbered on the
way in and restored on the reply; an event of a page session goes to the client that attached it, and the
browser's own events to every client. What a client leaves behind when it goes — the page sessions it
attached, the browser contexts it made with ``disposeOnDetach`` — the relay detaches and disposes, as the
browser does for a DevTools connection that closes (a killed worker's context and pages go with it).
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import threading
from typing import Any

from portability.web.cdp import SCHEME, ConnectionClosed, peer_uid

log = logging.getLogger(__name__)

#: a client that has not taken a message within this is dropped (it holds the browser's other clients up)
SEND_TIMEOUT_S = 30.0
#: the longest message a client may send (a command; the page's data travels over HTTP, not here)
MAX_COMMAND = 64 << 20
CHUNK = 1 << 20


class _Client:
    """One connected worker: its socket, and what it owns in the browser."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.send_lock = threading.Lock()
        self.sessions: set[str] = set()
        self.contexts: set[str] = set()
        self.alive = True

    def send(self, data: bytes) -> bool:
        with self.send_lock:
            if not self.alive:
                return False
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                self.alive = False
                return False


def _split(buf: bytearray) -> list[bytes]:
    """The whole NUL-ended messages at the head of ``buf`` (taken off it)."""
    out = []
    start = 0
    while (end := buf.find(b"\0", start)) >= 0:
        out.append(bytes(buf[start:end]))
        start = end + 1
    del buf[:start]
    return out


class DevToolsRelay:
    """``DevToolsRelay(to_browser, from_browser, path)`` serves the pipe's two ends (file descriptors, owned
    from then on) at the socket ``path``; ``endpoint`` names it for ``cdp.Connection``. ``close()`` stops it.
    When the browser closes its end, every client's connection closes too (their browser is gone)."""

    def __init__(self, to_browser: int, from_browser: int, path: str):
        self.path = path
        self.endpoint = SCHEME + path
        self._to, self._from = to_browser, from_browser
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        #: relay id -> (client, its own id, method, params) of a command waiting for its reply
        self._calls: dict[int, tuple[_Client | None, Any, str, dict[str, Any]]] = {}
        self._sessions: dict[str, _Client] = {}
        self._clients: set[_Client] = set()
        self._closed = False
        old = os.umask(0o177)
        try:
            self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._server.bind(path)
        finally:
            os.umask(old)
        self._server.listen(64)
        for target, name in ((self._accept_loop, "accept"), (self._browser_loop, "browser")):
            threading.Thread(target=target, name=f"portability-devtools-{name}", daemon=True).start()

    # -- into the browser ----------------------------------------------------------------------------
    def _write(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg).encode() + b"\0"
        with self._write_lock:
            if self._to < 0:
                raise ConnectionClosed("the browser is gone")
            view = memoryview(data)
            while view:
                view = view[os.write(self._to, view):]

    def _command(self, client: _Client | None, msg: dict[str, Any]) -> None:
        rid = next(self._ids)
        with self._lock:
            self._calls[rid] = (client, msg.get("id"), str(msg.get("method", "")), msg.get("params") or {})
        self._write({**msg, "id": rid})

    # -- out of the browser --------------------------------------------------------------------------
    def _browser_loop(self) -> None:
        buf = bytearray()
        try:
            while chunk := os.read(self._from, CHUNK):
                buf += chunk
                for raw in _split(buf):
                    self._from_browser(raw)
        except OSError:
            pass
        finally:
            self.close()
            os.close(self._from)  # here only: closed under a blocked read, its number could be reused

    def _from_browser(self, raw: bytes) -> None:
        try:
            msg = json.loads(raw)
        except ValueError:
            return
        if "id" in msg:
            with self._lock:
                call = self._calls.pop(msg["id"], None)
            if call is not None:
                self._reply(msg, *call)
            return
        session = msg.get("sessionId") or (msg.get("params") or {}).get("sessionId")
        with self._lock:
            owner = self._sessions.get(session) if session else None
            if owner is not None and msg.get("method") == "Target.detachedFromTarget":
                self._sessions.pop(session, None)
                owner.sessions.discard(session)
            to = [owner] if owner is not None else ([] if msg.get("sessionId") else list(self._clients))
        data = raw + b"\0"
        for client in to:
            self._send(client, data)

    def _reply(self, msg: dict[str, Any], client: _Client | None, cid: Any, method: str, params: dict[str, Any]) -> None:
        if client is None:
            return  # the relay's own clean-up
        result = msg.get("result") or {}
        with self._lock:
            if method == "Target.attachToTarget" and result.get("sessionId"):
                self._sessions[result["sessionId"]] = client
                client.sessions.add(result["sessionId"])
            elif method == "Target.createBrowserContext" and params.get("disposeOnDetach") and result.get("browserContextId"):
                client.contexts.add(result["browserContextId"])
            elif method == "Target.disposeBrowserContext":
                client.contexts.discard(params.get("browserContextId"))
            orphan = not client.alive  # its clean-up ran before this context or session was known
        if orphan:
            self._forget(client)
        self._send(client, json.dumps({**msg, "id": cid}).encode() + b"\0")

    def _send(self, client: _Client, data: bytes) -> None:
        if not client.send(data):
            self._drop(client)

    # -- clients -------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            try:
                if peer_uid(sock) != os.getuid():
                    log.warning("DevTools socket: refused a connection of uid %d", peer_uid(sock))
                    sock.close()
                    continue
                sock.settimeout(SEND_TIMEOUT_S)
            except OSError:
                sock.close()
                continue
            client = _Client(sock)
            with self._lock:
                if self._closed:
                    sock.close()
                    return
                self._clients.add(client)
            threading.Thread(target=self._client_loop, args=(client,), name="portability-devtools-client",
                             daemon=True).start()

    def _client_loop(self, client: _Client) -> None:
        buf = bytearray()
        try:
            while True:
                try:
                    chunk = client.sock.recv(CHUNK)
                except socket.timeout:
                    continue  # the timeout is the sends'; a client may stay quiet
                if not chunk:
                    break
                buf += chunk
                for raw in _split(buf):
                    msg = json.loads(raw)
                    if not isinstance(msg, dict) or "id" not in msg:
                        raise ValueError("a DevTools command without an id")
                    self._command(client, msg)
                if len(buf) > MAX_COMMAND:
                    raise ValueError("a DevTools command over the size limit")
        except (OSError, ValueError) as e:
            log.debug("DevTools client: %s", e)
        finally:
            self._drop(client)

    def _drop(self, client: _Client) -> None:
        """A client gone: close its socket, and detach and dispose what it left in the browser."""
        with client.send_lock:
            client.alive = False
        with self._lock:
            if client not in self._clients:
                return
            self._clients.discard(client)
        try:
            client.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        client.sock.close()
        self._forget(client)

    def _forget(self, client: _Client) -> None:
        with self._lock:
            sessions, client.sessions = list(client.sessions), set()
            contexts, client.contexts = list(client.contexts), set()
            for s in sessions:
                self._sessions.pop(s, None)
            closed = self._closed
        if closed:
            return
        try:
            for s in sessions:
                self._command(None, {"method": "Target.detachFromTarget", "params": {"sessionId": s}})
            for c in contexts:
                self._command(None, {"method": "Target.disposeBrowserContext", "params": {"browserContextId": c}})
        except OSError:
            pass  # the browser is gone, and what it held with it

    # -- end -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop serving; every client's connection closes. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            clients, self._clients = list(self._clients), set()
        for sock in [self._server] + [c.sock for c in clients]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for c in clients:
            c.alive = False
        with self._write_lock:  # the browser reads its end's close as the end of the session
            to, self._to = self._to, -1
        os.close(to)
        try:
            os.unlink(self.path)
        except OSError:
            pass
