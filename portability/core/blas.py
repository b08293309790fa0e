"""numpy's OpenBLAS in this process: its thread count, read and set through the library itself."""
from __future__ import annotations

import ctypes


def openblas():
    """(get, set) thread count functions of the OpenBLAS this process has loaded (numpy's), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({parts[5].strip() for parts in (ln.split(None, 5) for ln in f)
                            if len(parts) == 6 and "openblas" in parts[5].lower()})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""), ("openblas", "64_"), ("openblas", "")):
            get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
            put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
            if get is not None and put is not None:
                put.argtypes = [ctypes.c_int]
                return get, put
    return None


def blas_threads() -> int | None:
    """How many threads numpy's OpenBLAS uses in this process (None: no OpenBLAS loaded)."""
    fns = openblas()
    return int(fns[0]()) if fns else None
