"""Calibration batches in the shapes a model takes.

The check's inputs reach a calibrating converter as rows (``ConvertContext.calibration``: each input's
samples stacked on the first axis). A model whose batch dimension is static (exported at a batch of 2,
say) accepts only that many rows per call, so the rows are grouped into batches of the model's static
batch size; a dynamic batch is fed one row at a time.
"""
from __future__ import annotations

import numpy as np


def static_batch(shape) -> int:
    """The leading dimension of an input's ``shape`` when it is a fixed size, else 1."""
    d = shape[0] if shape else None
    return d if isinstance(d, int) and not isinstance(d, bool) and d > 0 else 1


def batch_of(signature_inputs: list[dict], resolved: dict[str, list[int]] | None = None) -> dict[str, int]:
    """Each input's batch size, from a signature's ``inputs``: its static one, else the one the check resolved for
    it (``ConvertContext.input_shapes``: ``--shape``; a model whose batch dimension is also another axis's, as a
    square ``[n, n]`` input's, takes no call of one row), else 1."""
    def shape(t: dict) -> list:
        own = t.get("shape") or []
        fixed = bool(own) and static_batch(own[:1]) == own[0]
        return own if fixed else (resolved or {}).get(t["name"]) or own

    return {t["name"]: static_batch(shape(t)) for t in signature_inputs}


def calibration_batches(cal: dict[str, np.ndarray], batch: dict[str, int],
                        max_samples: int) -> tuple[list[dict[str, np.ndarray]], int]:
    """``cal``'s rows grouped into one dict per model call, each input ``batch[name]`` rows (1 if not
    named), at most ``max_samples`` rows in all (but at least one call). Returns the calls and the number
    of rows they hold. An input with fewer rows than its batch has them repeated to fill the one call."""
    size = {k: batch.get(k, 1) for k in cal}
    calls = max(1, min(min(len(a) // size[k] for k, a in cal.items()), max(1, max_samples // max(size.values()))))
    out = []
    for i in range(calls):
        item = {}
        for k, a in cal.items():
            a, b = np.asarray(a), size[k]
            item[k] = a[i * b:(i + 1) * b] if len(a) >= b else np.resize(a, (b,) + a.shape[1:])
        out.append(item)
    return out, calls * max(size.values())


def converter_error_lines(e: Exception, limit: int = 6) -> list[str]:
    """The lines of TensorFlow's converter error that say what failed. The line that explains (one with
    ``error:``, else the last line before any traceback) often starts with a source path under
    ``tensorflow/``: it is kept, the path shortened to the file's name; other ``tensorflow/`` lines are
    location noise and dropped."""
    import re

    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    tb = next((i for i, ln in enumerate(lines) if ln.startswith("Traceback")), len(lines))
    lines = lines[:tb]
    tf_lines = [ln for ln in lines if "tensorflow/" in ln]
    why = [ln for ln in tf_lines if "error:" in ln] or tf_lines[-1:]
    short = [re.sub(r"(?:\S*/)?tensorflow/(?:[\w.-]+/)*", "", ln) for ln in why]
    kept = short + [ln for ln in lines if "tensorflow/" not in ln]
    return [ln[:400] for ln in dict.fromkeys(kept)][:limit] or [type(e).__name__]
