"""The standard-library DevTools client and the relay that shares one browser's DevTools pipe: ``Link`` and
``Connection`` against a scripted socket server, and ``DevToolsRelay`` against a scripted browser on a pipe
pair (no browser in either)."""
from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from portability.web.cdp import SCHEME, CDPError, Connection, ConnectionClosed, Link
from portability.web.relay import DevToolsRelay


@pytest.fixture
def server(tmp_path):
    """``(endpoint, run)``: ``run(script)`` serves one connection with ``script(sock)`` in a thread."""
    path = str(tmp_path / "s")
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(4)
    threads, errors = [], []

    def run(script):
        def serve():
            conn, _ = lsock.accept()
            try:
                script(conn)
            except Exception as e:  # surfaced by the test
                errors.append(e)
            finally:
                conn.close()
        threads.append(threading.Thread(target=serve, daemon=True))
        threads[-1].start()
        return threads[-1]

    yield SCHEME + path, run
    for t in threads:
        t.join(10)
    lsock.close()
    assert not errors, errors


def _read_msg(sock: socket.socket, buf: bytearray) -> dict:
    while b"\0" not in buf:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("went away")
        buf += chunk
    end = buf.index(b"\0")
    raw = bytes(buf[:end])
    del buf[:end + 1]
    return json.loads(raw)


def test_link_reassembles_messages_split_anywhere_and_carries_large_ones(server):
    endpoint, run = server
    big = os.urandom(3 * 2**20).hex()  # 6 MB of text
    seen = {}

    def script(sock):
        buf = bytearray()
        seen["hello"] = _read_msg(sock, buf)
        sock.sendall(b'"one"\0"tw')
        time.sleep(0.2)
        sock.sendall(b'o"\0' + json.dumps(big).encode() + b"\0")
        seen["echo"] = _read_msg(sock, buf)

    served = run(script)
    link = Link(endpoint)
    link.send_text(json.dumps({"hello": 1}))
    assert link.recv(10) == '"one"'
    assert link.recv(10) == '"two"'
    assert json.loads(link.recv(10)) == big
    link.send_text(json.dumps(big[:200_000]))
    served.join(10)
    with pytest.raises(ConnectionClosed):
        link.recv(10)
    link.close()
    assert seen == {"hello": {"hello": 1}, "echo": big[:200_000]}


def test_link_recv_times_out_and_keeps_a_partial_message(server):
    endpoint, run = server
    go = threading.Event()

    def script(sock):
        sock.sendall(b'"' + b"x" * 100)
        go.wait(10)
        sock.sendall(b"x" * 200 + b'"\0')

    run(script)
    link = Link(endpoint)
    assert link.recv(0.2) is None
    go.set()
    assert link.recv(10) == '"' + "x" * 300 + '"'
    link.close()


def test_connection_matches_replies_hands_events_over_and_raises_errors(server):
    endpoint, run = server

    def script(sock):
        buf = bytearray()
        for _ in range(2):
            msg = _read_msg(sock, buf)
            sock.sendall(json.dumps({"method": "Log.entryAdded", "params": {"n": msg["id"]}}).encode() + b"\0")
            reply = {"result": {"echo": msg["params"]}} if msg["method"] == "Echo" else {"error": {"code": -32000, "message": "nope"}}
            sock.sendall(json.dumps({"id": msg["id"], "sessionId": msg.get("sessionId"), **reply}).encode() + b"\0")

    run(script)
    events = []
    conn = Connection(endpoint, on_event=events.append)
    assert conn.call("Echo", {"a": [1, 2]}, session="S1", timeout=10) == {"echo": {"a": [1, 2]}}
    with pytest.raises(CDPError, match="Fail: nope"):
        conn.call("Fail", timeout=10)
    conn.close()
    assert [e["params"]["n"] for e in events] == [1, 2]


def test_connection_closed_by_the_peer_is_a_connection_error(server):
    endpoint, run = server
    run(lambda sock: sock.recv(100))  # reads the command, then drops the socket without replying
    conn = Connection(endpoint)
    with pytest.raises(ConnectionError):
        conn.call("Never", timeout=10)
    conn.close()


def test_an_endpoint_that_is_not_a_socket_is_refused():
    with pytest.raises(ValueError, match="not a DevTools socket"):
        Link("http://127.0.0.1:9222")


class FakeBrowser:
    """The browser's side of a DevTools pipe: answers each command with ``answer(msg)`` (a result dict), and
    records what it was sent; ``emit`` sends an event."""

    def __init__(self, answer):
        self.commands_r, self.commands_w = os.pipe()
        self.replies_r, self.replies_w = os.pipe()
        self.answer, self.seen, self.lock = answer, [], threading.Lock()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        buf = bytearray()
        while chunk := os.read(self.commands_r, 1 << 20):
            buf += chunk
            while b"\0" in buf:
                end = buf.index(b"\0")
                msg = json.loads(bytes(buf[:end]))
                del buf[:end + 1]
                with self.lock:
                    self.seen.append(msg)
                self.emit({"id": msg["id"], "result": self.answer(msg)})
        self.die()

    def emit(self, msg):
        with self.lock:
            if self.replies_w >= 0:
                os.write(self.replies_w, json.dumps(msg).encode() + b"\0")

    def die(self):
        """The browser's end of the replies' pipe closes (as when it exits)."""
        with self.lock:
            fd, self.replies_w = self.replies_w, -1
        if fd >= 0:
            os.close(fd)

    def methods(self):
        with self.lock:
            return [(m["method"], m.get("params")) for m in self.seen]


def _answer(msg):
    return {"Target.attachToTarget": {"sessionId": "S-" + str(msg.get("params", {}).get("targetId"))},
            "Target.createBrowserContext": {"browserContextId": "C%d" % msg["id"]}}.get(msg["method"], {"ok": msg["id"]})


@pytest.fixture
def relay(tmp_path):
    fake = FakeBrowser(_answer)
    r = DevToolsRelay(fake.commands_w, fake.replies_r, str(tmp_path / "devtools"))
    yield fake, r
    r.close()


def _wait(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_the_relay_renumbers_commands_and_routes_each_reply_and_session_event_to_its_client(relay):
    fake, r = relay
    a_events, b_events = [], []
    a, b = Connection(r.endpoint, on_event=a_events.append), Connection(r.endpoint, on_event=b_events.append)
    # both clients number their commands from 1: the browser sees distinct ids, each client its own reply
    sa = a.call("Target.attachToTarget", {"targetId": "A", "flatten": True}, timeout=10)["sessionId"]
    sb = b.call("Target.attachToTarget", {"targetId": "B", "flatten": True}, timeout=10)["sessionId"]
    assert (sa, sb) == ("S-A", "S-B")
    ids = [m["id"] for m in fake.seen]
    assert len(set(ids)) == 2
    fake.emit({"method": "Runtime.consoleAPICalled", "sessionId": "S-B", "params": {"to": "b"}})
    fake.emit({"method": "Runtime.consoleAPICalled", "sessionId": "S-A", "params": {"to": "a"}})
    fake.emit({"method": "Target.targetCrashed", "params": {"targetId": "X"}})  # the browser's own: to all
    fake.emit({"method": "Runtime.consoleAPICalled", "sessionId": "S-nobody", "params": {}})  # no owner: dropped
    assert a.call("Ping", timeout=10) and b.call("Ping", timeout=10)
    assert [e["params"] for e in a_events] == [{"to": "a"}, {"targetId": "X"}]
    assert [e["params"] for e in b_events] == [{"to": "b"}, {"targetId": "X"}]
    a.close()
    b.close()


def test_a_client_that_goes_leaves_nothing_behind_but_what_it_made_to_outlive_it(relay):
    fake, r = relay
    a = Connection(r.endpoint)
    mine = a.call("Target.createBrowserContext", {"disposeOnDetach": True}, timeout=10)["browserContextId"]
    kept = a.call("Target.createBrowserContext", {}, timeout=10)["browserContextId"]  # a kept page's: stays
    session = a.call("Target.attachToTarget", {"targetId": "P", "flatten": True}, timeout=10)["sessionId"]
    a.close()
    _wait(lambda: ("Target.disposeBrowserContext", {"browserContextId": mine}) in fake.methods())
    assert ("Target.detachFromTarget", {"sessionId": session}) in fake.methods()
    assert ("Target.disposeBrowserContext", {"browserContextId": kept}) not in fake.methods()
    b = Connection(r.endpoint)  # the relay still serves the others
    assert b.call("Ping", timeout=10)
    b.close()


def test_the_relay_answers_bad_input_by_dropping_that_client_only(relay):
    fake, r = relay
    bad = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bad.connect(r.path)
    bad.sendall(b"not json\0")
    bad.settimeout(10)
    assert bad.recv(10) == b""  # closed
    bad.close()
    good = Connection(r.endpoint)
    assert good.call("Ping", timeout=10)
    good.close()


def test_when_the_browser_goes_every_client_sees_its_connection_close(relay):
    fake, r = relay
    a = Connection(r.endpoint)
    assert a.call("Ping", timeout=10)
    fake.die()
    with pytest.raises(ConnectionError):
        a.call("Ping", timeout=10)
    a.close()
