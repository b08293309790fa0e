"""A read-only static server for a bundle folder: GET and HEAD of its files, nothing else.

Every answer carries the cross-origin isolation headers (COOP/COEP/CORP) that multi-threaded wasm needs,
as the check's own harness server does (``web/server.py``), and the MIME types the page needs
(``.mjs`` as JavaScript, ``.wasm`` as ``application/wasm``).
"""
from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from portability.web.server import MIME, _inside

log = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    root: Path
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # the headers and the body are two writes (``web/server.py``)

    def log_message(self, fmt, *args) -> None:
        log.debug("bundle http: " + fmt, *args)

    def _headers(self, status: int, ctype: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.end_headers()

    def _file(self) -> Path | None:
        rel = unquote(urlsplit(self.path).path).lstrip("/") or "index.html"
        return _inside(self.root, rel + "index.html" if rel.endswith("/") else rel)

    def _answer(self, body: bool) -> None:
        path = self._file()
        if path is None:
            data = b"404\n"
            self._headers(404, "text/plain", len(data))
            if body:
                self.wfile.write(data)
            return
        self._headers(200, MIME.get(path.suffix, "application/octet-stream"), path.stat().st_size)
        if body:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    self.wfile.write(chunk)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)

    def _refuse(self) -> None:
        self._headers(405, "text/plain", 0)

    do_PUT = do_POST = do_DELETE = do_PATCH = _refuse


class BundleServer:
    """``start()`` serves ``folder`` on ``host:port`` (0: a free port) in a thread; ``close()`` stops it."""

    def __init__(self, folder: Path, host: str = "127.0.0.1", port: int = 0):
        handler = type("Handler", (_Handler,), {"root": Path(folder).resolve()})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}/"

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
