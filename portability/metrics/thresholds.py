"""Thresholds and the verdict: does a target that ran pass, or did it drift?"""
from __future__ import annotations

#: a bound of None is not checked
DEFAULTS: dict[str, float | None] = {
    "max_abs": 1e-4,  # worst absolute difference on any output element
    "max_abs_steps": None,  # the same in quantization steps of the output (quantized targets only)
    "cosine": 0.9999,  # lowest cosine similarity of any output with the reference
    "top1_agreement": 1.0,  # share of rows whose arg-max class matches the reference's
    "accuracy_drop": 0.01,  # largest allowed fall in task accuracy (labelled data only)
}


def merged(*layers: dict | None) -> dict[str, float | None]:
    out = dict(DEFAULTS)
    for layer in layers:
        for k, v in (layer or {}).items():
            if k not in DEFAULTS:
                raise KeyError(k)
            out[k] = v
    return out


def breaches(outputs: dict[str, dict], agreement: float | None, accuracy_delta: float | None, t: dict) -> list[str]:
    """Human-readable reasons a target is ``drift`` (empty: within every threshold)."""
    out: list[str] = []
    for name, m in outputs.items():
        if m.get("nonfinite_mismatch"):
            out.append(f"'{name}': {m['nonfinite_mismatch']} NaN/Inf values where the reference has none (or the reverse)")
        elif t.get("max_abs") is not None and m["max_abs"] > t["max_abs"]:
            out.append(f"'{name}': max_abs {m['max_abs']:.3g} > {t['max_abs']:.3g}")
        if t.get("max_abs_steps") is not None and m.get("max_abs_steps") is not None and m["max_abs_steps"] > t["max_abs_steps"]:
            out.append(f"'{name}': max_abs {m['max_abs_steps']:.2f} quantization steps > {t['max_abs_steps']:g}")
        if t.get("cosine") is not None and m["cosine"] < t["cosine"] and not m.get("nonfinite_mismatch"):
            out.append(f"'{name}': cosine {m['cosine']:.6f} < {t['cosine']}")
    if t.get("top1_agreement") is not None and agreement is not None and agreement < t["top1_agreement"]:
        out.append(f"top-1 agreement {agreement:.4f} < {t['top1_agreement']}")
    if t.get("accuracy_drop") is not None and accuracy_delta is not None and -accuracy_delta > t["accuracy_drop"]:
        out.append(f"accuracy fell by {-accuracy_delta:.4f} > {t['accuracy_drop']}")
    return out
