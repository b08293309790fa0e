"""A loopback HTTP server for one web run: the harness, the npm files it needs, this run's model.

It listens on 127.0.0.1 on a free port, behind a random token path prefix, and serves only:

    /<token>/h/<file>       the harness (portability/web/harness)
    /<token>/m/<pkg>/<file> allow-listed folders of node_modules (the runtimes' dist and wasm files)
    /<token>/a/<file>       the artifact's folder (the model the page fetches itself)
    /<token>/io/<name>      in-memory tensors: GET the feeds Python put, PUT the outputs the page computed

Every answer carries the cross-origin isolation headers (COOP/COEP/CORP) that multi-threaded wasm
needs, unless ``isolated=False`` (used to prove the multi-thread fallback is caught). ``served`` counts
the bytes sent per route, so callers can see that the page fetched the model over HTTP.
"""
from __future__ import annotations

import logging
import secrets
import socketserver
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

log = logging.getLogger(__name__)

MIME = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".wasm": "application/wasm",
    ".map": "application/json",
    ".onnx": "application/octet-stream",
    ".ort": "application/octet-stream",
    ".tflite": "application/octet-stream",
    ".bin": "application/octet-stream",
}

#: the largest body a page may PUT (its outputs)
MAX_PUT = 1 << 31
#: how often the serving loop looks for a shutdown (``serve_forever``'s default, 0.5 s, is what closing waited)
_POLL_S = 0.05


def _inside(root: Path, rel: str) -> Path | None:
    """``root/rel`` if it is an existing file inside ``root`` (no ``..``, no symlink escape)."""
    if not rel or rel.startswith("/") or "\0" in rel:
        return None
    try:
        p = (root / rel).resolve()
        p.relative_to(root.resolve())
    except (ValueError, OSError):
        return None
    return p if p.is_file() else None


class _LoopbackServer(ThreadingHTTPServer):
    """An HTTP server on the loopback address, named by it: ``HTTPServer.server_bind`` asks the resolver for the
    address's fully qualified name (``socket.getfqdn``: a reverse lookup, and the IDNA codec's import), a few ms of
    every web target's worker, for a name nothing here reads."""

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class HarnessServer:
    """Use as a context manager, or ``start()`` / ``close()``; ``close`` is idempotent."""

    def __init__(self, harness_dir: Path, modules_dir: Path, isolated: bool = True, module_dirs: tuple[str, ...] = (),
                 allow_origin: str | None = None):
        """``module_dirs``: the folders under ``modules_dir`` the page may fetch (the runtime's packages'
        ``dist`` folders, say); nothing else there is served. ``allow_origin``: the one other origin whose
        page may fetch and PUT here (CORS): a kept page (``web/pool.py``), served by the browser's own server."""
        self.allow_origin = allow_origin
        self.token = secrets.token_urlsafe(12)
        self.roots = {"h": Path(harness_dir), "m": Path(modules_dir)}
        self.isolated = isolated
        self.module_dirs = tuple(d.rstrip("/") for d in module_dirs)
        self.served: Counter[str] = Counter()  # route path -> bytes sent
        self.blobs: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> "HarnessServer":
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = _LoopbackServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # a short poll: ``shutdown`` waits for the loop to see it, and a worker closes its server as it ends
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": _POLL_S},
                                        name="portability-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "HarnessServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- what it serves ------------------------------------------------------------------------------
    @property
    def origin(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base(self) -> str:
        """URL prefix of every route (ends with ``/``)."""
        return f"{self.origin}/{self.token}/"

    def serve_artifact(self, folder: Path) -> str:
        """Serve ``folder``'s files under ``a/``; returns that URL prefix."""
        self.roots["a"] = Path(folder)
        return self.base + "a/"

    def put_blob(self, name: str, data: bytes) -> str:
        with self._lock:
            self.blobs[name] = data
        return f"{self.base}io/{name}"

    def take_blob(self, name: str) -> bytes:
        with self._lock:
            return self.blobs.pop(name)

    def resolve(self, route: str, rel: str) -> Path | None:
        root = self.roots.get(route)
        if root is None:
            return None
        if route == "m" and not any(rel.startswith(d + "/") for d in self.module_dirs):
            return None
        return _inside(root, rel)


class _Handler(BaseHTTPRequestHandler):
    owner: HarnessServer
    protocol_version = "HTTP/1.1"
    # a response is its headers, then its body, in two writes: with Nagle's algorithm the body waits for the
    # page's delayed ACK of the headers (40 ms on Linux) on a kept-alive connection
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args) -> None:  # library code logs, never prints
        log.debug("http: " + fmt, *args)

    def _split(self) -> tuple[str, str] | None:
        path = unquote(urlsplit(self.path).path)
        prefix = f"/{self.owner.token}/"
        if not path.startswith(prefix):
            return None
        route, _, rel = path[len(prefix):].partition("/")
        return route, rel

    def _headers(self, status: int, ctype: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        if self.owner.allow_origin:
            self.send_header("Access-Control-Allow-Origin", self.owner.allow_origin)
            self.send_header("Vary", "Origin")
        if self.owner.isolated:
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Cross-Origin-Resource-Policy", "cross-origin" if self.owner.allow_origin else "same-origin")
        self.end_headers()

    def do_OPTIONS(self) -> None:
        """The CORS preflight of the allowed origin's PUT (nothing else is allowed)."""
        if self._split() is None or not self.owner.allow_origin or self.headers.get("Origin") != self.owner.allow_origin:
            return self._fail(404)
        self.send_response(204)
        self.send_header("Access-Control-Allow-Origin", self.owner.allow_origin)
        self.send_header("Access-Control-Allow-Methods", "GET, PUT")
        self.send_header("Access-Control-Allow-Headers", "content-type")
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _fail(self, status: int) -> None:
        body = f"{status}\n".encode()
        self._headers(status, "text/plain", len(body))
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = self._split()
        if parts is None:
            return self._fail(404)
        route, rel = parts
        if route == "io":
            with self.owner._lock:
                data = self.owner.blobs.get(rel)
            if data is None:
                return self._fail(404)
            self._headers(200, "application/octet-stream", len(data))
            self.wfile.write(data)
            return
        path = self.owner.resolve(route, rel)
        if path is None:
            return self._fail(404)
        size = path.stat().st_size
        self._headers(200, MIME.get(path.suffix, "application/octet-stream"), size)
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                with self.owner._lock:  # counted before it is sent: whoever received it sees the count
                    self.owner.served[f"{route}/{rel}"] += len(chunk)
                self.wfile.write(chunk)

    def do_PUT(self) -> None:
        parts = self._split()
        length = int(self.headers.get("Content-Length") or -1)
        if parts is None or parts[0] != "io" or not parts[1] or not 0 <= length <= MAX_PUT:
            return self._fail(404 if parts is None else 400)
        data = self.rfile.read(length)
        self.owner.put_blob(parts[1], data)
        self._headers(204, "text/plain", 0)
