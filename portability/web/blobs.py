"""Tensors to and from a page in blobs: batches grouped so that one blob stays within a size, and a blob of
outputs unpacked by the page's descriptions of it (name, dtype, shape, offset, byte count)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def groups(batches: list[dict[str, np.ndarray]], max_bytes: int) -> Iterator[list[dict[str, np.ndarray]]]:
    """The batches in order, in groups of at most ``max_bytes`` of arrays (a batch larger alone: its own group)."""
    group: list[dict[str, np.ndarray]] = []
    size = 0
    for b in batches:
        n = sum(a.nbytes for a in b.values())
        if group and size + n > max_bytes:
            yield group
            group, size = [], 0
        group.append(b)
        size += n
    if group:
        yield group


def unpack(descs: list[dict[str, Any]], data: bytes) -> dict[str, np.ndarray]:
    """The arrays a blob holds, by the page's description of each (a ``bool`` travels as one byte each)."""
    out = {}
    for d in descs:
        dtype = np.uint8 if d["dtype"] == "bool" else np.dtype(d["dtype"])
        a = np.frombuffer(data, dtype=dtype, count=d["nbytes"] // np.dtype(dtype).itemsize, offset=d["offset"])
        a = a.reshape(d["shape"]).copy()
        out[d["name"]] = a.astype(bool) if d["dtype"] == "bool" else a
    return out
