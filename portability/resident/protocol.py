"""What crosses the resident session's socket: one JSON object per line, each line bounded, and the closed lists a
request picks from (the services, their sandbox modes, the requests themselves).

A request names its service by name (``PROVIDERS``), never by import path: the resident process imports what
this list says and nothing a request says. Its services always run under the OS sandbox (``SERVICE_MODES``):
a check whose sandbox is off starts services of its own instead, so no request can make a shared service
unconfined.
"""
from __future__ import annotations

import json
import socket
import struct
from typing import Any, BinaryIO

#: seconds with no lease held and no request after which the resident session lets go of its worker pools and the
#: browsers' kept pages (``server.Resident.trim``), keeping the browsers and the emulator
TRIM_S = 60.0

#: the longest line either side reads (bytes, its newline included); a longer one is refused
MAX_LINE = 1 << 20
#: how long the resident process waits for a connection's request line (seconds)
REQUEST_TIMEOUT_S = 10.0
#: the services a check may lease: name -> the provider class (``workers.services``) that runs them
PROVIDERS: dict[str, str] = {
    "browser": "portability.web.service:BrowserService",
    "arm64": "portability.mobile.arm64_service:Arm64Service",
}
#: the provider of the worker pools (the ``pool`` and ``warm`` requests): no ``lease`` names it
POOL_HOST = "portability.workers.zygote_handle:ZygoteHost"
#: the OS sandbox modes (``core.sandbox.MODES``) a shared service runs in: never "off"
SERVICE_MODES = ("auto", "require")
#: every request a connection may start with
OPS = ("status", "stop", "lease", "running", "pool", "warm")
#: the longest flavour (a service's variant: a browser's WebGPU switch, a pool's name) a request may name
MAX_FLAVOUR = 64


class BadRequest(ValueError):
    """A line that is not a request this protocol knows; ``str()`` is the one-line answer the peer gets."""


def encode(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def read_line(f: BinaryIO) -> bytes:
    """The next line of ``f`` (empty at the end of the stream). Raises BadRequest for a line over ``MAX_LINE``
    bytes, TimeoutError where the socket's timeout passed first."""
    line = f.readline(MAX_LINE)
    if len(line) >= MAX_LINE and not line.endswith(b"\n"):
        raise BadRequest(f"a line over {MAX_LINE} bytes")
    return line


def decode(line: bytes) -> dict[str, Any]:
    """A line's JSON object. Raises BadRequest for anything else (bad UTF-8 or JSON, an array, a number)."""
    try:
        message = json.loads(line)
    except ValueError:
        raise BadRequest("not a JSON line") from None
    if not isinstance(message, dict):
        raise BadRequest(f"not a JSON object but {type(message).__name__}")
    return message


def provider_name(cls_path: str) -> str | None:
    """The name (``PROVIDERS``) of the provider class ``cls_path``, None where the resident session has none."""
    return next((name for name, path in PROVIDERS.items() if path == cls_path), None)


def service_mode(mode: Any) -> str:
    """A lease's sandbox mode: one of ``SERVICE_MODES``, "auto" where none is given. Raises BadRequest."""
    mode = mode or "auto"
    if mode == "off":
        raise BadRequest("the resident session's services always run sandboxed: a check with the sandbox off "
                         "starts services of its own")
    if mode not in SERVICE_MODES:
        raise BadRequest(f"unknown sandbox mode {mode!r} (known: {', '.join(SERVICE_MODES)})")
    return mode


def flavour(value: Any) -> str | bool | int | None:
    """A service's flavour: a JSON scalar (a string of at most ``MAX_FLAVOUR`` characters). Raises BadRequest."""
    if value is None or isinstance(value, (bool, int)) or (isinstance(value, str) and len(value) <= MAX_FLAVOUR):
        return value
    raise BadRequest(f"a flavour is a short string, a number, true/false or null, not {type(value).__name__}")


def environment(value: Any) -> dict[str, str]:
    """A worker's environment as a request gives it: an object of strings. Raises BadRequest."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise BadRequest("an environment is a JSON object of strings")
    return value


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (the kernel's word: ``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]
