"""Reading a child's output to its end, within a deadline."""
from __future__ import annotations

import os
import selectors
import time


def read_to_end(fd: int, deadline: float | None) -> tuple[bytes, bool]:
    """Everything readable from ``fd`` until end of file, and whether ``deadline`` (``time.monotonic()``; None:
    none) passed first (the bytes are then what came before it)."""
    out = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if not (sel.select(left) if left is None or left > 0 else []):
                if deadline is not None and time.monotonic() >= deadline:
                    return bytes(out), True
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return bytes(out), False
            out += chunk
