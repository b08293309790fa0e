"""A read-only static server for a bundle folder: GET and HEAD of its files, nothing else.

Every answer carries the cross-origin isolation headers (COOP/COEP/CORP) that multi-threaded wasm needs,
as the check's own harness server does (``web/server.py``), and the MIME types the page needs
(``.mjs`` as JavaScript, ``.wasm`` as ``application/wasm``).

It is careful about whom it answers. It listens on loopback unless given another address (the command
line then warns, and prints the address really bound). Every request's ``Host`` must name this machine:
on a loopback bind ``localhost`` or a loopback address; on another bind also any IP address, this
machine's host names and the name it was bound by, so a page of another site whose name was rebound to
this machine's address (DNS rebinding) is answered 403 whatever the bind. A connection idle or stalled
for ``TIMEOUT_S`` is closed, at most ``MAX_CONNECTIONS`` are open at once, any error answer (and any
answer to a request that carried a body, which is never read) closes its connection, and a client that
goes away mid-answer is logged in one line.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from portability.core.errors import UsageError
from portability.web.server import MIME, _inside

log = logging.getLogger(__name__)

#: seconds a connection may wait on its client (to send a request, or to take the answer) before it is closed
TIMEOUT_S = 10.0
#: connections served at once; more are closed as they come
MAX_CONNECTIONS = 64
#: names every bind answers to, besides loopback addresses
LOCAL_NAMES = frozenset({"localhost"})


def listen_address(host: str, port: int) -> tuple[socket.AddressFamily, tuple]:
    """(family, socket address) to listen on for ``--host``: an IPv4 or IPv6 address (``::1``, ``[::1]``) or a
    name of this machine; UsageError when there is none."""
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if not name:
        raise UsageError("--host is empty: give an address to listen on (127.0.0.1, ::1, or 0.0.0.0 for every interface)")
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, OverflowError) as e:
        why = getattr(e, "strerror", None) or e
        raise UsageError(f"--host {host}: not an address this machine can listen on ({why})") from None
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _host_name(header: str) -> str:
    """The name of a ``Host`` header, without its port or an IPv6 address's brackets, in lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class _Handler(BaseHTTPRequestHandler):
    root: Path
    #: the names a request's Host may give; and whether IP addresses other than loopback ones are refused
    names: frozenset[str]
    loopback_only: bool
    timeout = TIMEOUT_S
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # the headers and the body are two writes (``web/server.py``)

    def log_message(self, fmt, *args) -> None:
        log.debug("bundle http: " + fmt, *args)

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError) as e:
            log.info("bundle http: %s went away mid-answer (%s)", self.client_address[0], type(e).__name__)

    def _headers(self, status: int, ctype: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        if self._has_body():  # never read: it must not be taken for the next request
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()

    def _has_body(self) -> bool:
        return self.headers.get("Content-Length", "0").strip() not in ("", "0") or "Transfer-Encoding" in self.headers

    def _plain(self, status: int, text: str, body: bool, **headers: str) -> None:
        """An error answer, which closes the connection."""
        data = (text + "\n").encode()
        self.send_response(status)
        for k, v in {"Content-Type": "text/plain; charset=utf-8", "Content-Length": str(len(data)),
                     "Cache-Control": "no-store", "Connection": "close", **headers}.items():
            self.send_header(k, v)
        self.end_headers()
        self.close_connection = True
        if body:
            self.wfile.write(data)

    def _host_allowed(self) -> bool:
        name = _host_name(self.headers.get("Host") or "")
        ip = _ip(name)
        if name in self.names or (ip is not None and (ip.is_loopback or not self.loopback_only)):
            return True
        log.info("bundle http: %s asked for host %r: refused (DNS rebinding?)", self.client_address[0], name[:100])
        return False

    def _file(self) -> Path | None:
        rel = unquote(urlsplit(self.path).path).lstrip("/") or "index.html"
        return _inside(self.root, rel + "index.html" if rel.endswith("/") else rel)

    def _answer(self, body: bool) -> None:
        if not self._host_allowed():
            return self._plain(403, "403: this server answers only requests addressed to this machine", body)
        path = self._file()
        try:
            size = path.stat().st_size if path is not None else None
        except OSError:
            size = None
        if size is None:
            return self._plain(404, "404", body)
        self._headers(200, MIME.get(path.suffix, "application/octet-stream"), size)
        if body:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    self.wfile.write(chunk)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)

    def _refuse(self) -> None:
        self._plain(405, "405: this server is read-only (GET and HEAD)", True, Allow="GET, HEAD")

    do_PUT = do_POST = do_DELETE = do_PATCH = _refuse


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS  # a page asks for its files at once

    def __init__(self, family: socket.AddressFamily, sockaddr: tuple, handler: type):
        self.address_family = family
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(sockaddr, handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # not HTTPServer's: it looks the address's name up in DNS
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("bundle http: %d connections open already: %s closed", MAX_CONNECTIONS, client_address[0])
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        e = sys.exc_info()[1]
        log.warning("bundle http: %s: %s: %s", client_address[0], type(e).__name__, e)
        log.debug("bundle http: the error's traceback", exc_info=True)


class BundleServer:
    """``start()`` serves ``folder`` on ``host:port`` (0: a free port) in a thread; ``close()`` stops it. The
    address is bound at construction: a wrong or taken address is a UsageError before anything else is done."""

    def __init__(self, folder: Path, host: str = "127.0.0.1", port: int = 0, timeout_s: float = TIMEOUT_S):
        family, sockaddr = listen_address(host, port)
        bound = _ip(str(sockaddr[0]))
        self.loopback = bool(bound and bound.is_loopback)
        names = LOCAL_NAMES if self.loopback else LOCAL_NAMES | _machine_names(host)
        handler = type("Handler", (_Handler,), {"root": Path(folder).resolve(), "names": names,
                                                "loopback_only": self.loopback, "timeout": timeout_s})
        try:
            self.httpd = _Server(family, sockaddr, handler)
        except OSError as e:
            raise UsageError(f"cannot listen on {host} port {port}: {e.strerror or e}") from None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The address really bound (``0.0.0.0``/``::``: every interface, not an address to open)."""
        host, port = self.httpd.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def every_interface(self) -> bool:
        ip = _ip(str(self.httpd.server_address[0]))
        return bool(ip and ip.is_unspecified)

    def start(self) -> "BundleServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="portability-bundle", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self.httpd.server_close()


def _machine_names(host: str) -> frozenset[str]:
    """This machine's names, and ``host`` when it is a name: what a device on the network may call it."""
    names = {socket.gethostname(), socket.getfqdn()}
    names |= {n.split(".")[0] + ".local" for n in names if n}
    if _ip(host.strip("[]")) is None:
        names.add(host)
    return frozenset(n.lower() for n in names if n)
