"""Thresholds: the defaults every metric declares, merged with the target's and the user's bounds; the
bounds of reduced precision, which a quantized target (or a model that is quantized already) is held to."""
from __future__ import annotations

from portability.metrics import METRICS, default_thresholds

#: a bound of None is not checked
DEFAULTS: dict[str, float | None] = default_thresholds()

#: Reduced precision is held to looser, honest bounds. Quantized models are expected to differ numerically:
#: they are judged on whether they still predict the same (cosine, top-1 agreement, accuracy with
#: --dataset); their max_abs is reported, for int8 also in quantization steps of each output.
FP16 = {"max_abs": 1e-2, "cosine": 0.999, "top1_agreement": 0.99}
#: bfloat16 keeps float32's range with 8 significant bits: an absolute bound would only measure the outputs' size
BF16 = {"max_abs": None, "cosine": 0.999, "top1_agreement": 0.99}
DYNINT8 = {"max_abs": None, "cosine": 0.999, "top1_agreement": 0.95}
INT8 = {"max_abs": None, "cosine": 0.99, "top1_agreement": 0.95}
#: 4-bit weights (MatMulNBits, blocks of 32): each weight moves by up to half of one of 16 steps of its block's
#: range, so outputs move more than int8's; judged on the same agreement with a looser cosine
Q4 = {"max_abs": None, "cosine": 0.98, "top1_agreement": 0.9}


def merged(*layers: dict | None) -> dict[str, float | None]:
    out = dict(DEFAULTS)
    for layer in layers:
        for k, v in (layer or {}).items():
            if k not in DEFAULTS:
                raise KeyError(k)
            out[k] = v
    return out


def looser(a: dict, b: dict) -> dict[str, float | None]:
    """Per bound, the looser of two full threshold sets (an unchecked bound is the loosest)."""
    floors = {k for m in METRICS for k, t in m.THRESHOLDS.items() if t.floor}
    out = {}
    for k in a.keys() | b.keys():
        x, y = a.get(k), b.get(k)
        out[k] = None if x is None or y is None else (min(x, y) if k in floors else max(x, y))
    return out
