"""The bounds of a comparison of outputs: the breaches of thresholds by an output's drift (``Breach``), the
judgement over a target's outputs (``Judgement``) and what sets apart the places that compare outputs
(``Rule``: the check, golden outputs, localize, a conformance case). ``drift.judge`` measures and judges."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Rule:
    """How one comparison reads the thresholds: what sets apart the places that judge outputs (the check,
    golden outputs, localize's divergence, a conformance case). The default is the check's."""

    #: NaN/Inf on both sides, in the same places, is a breach (no evidence of agreement there)
    both_nonfinite: bool = True
    #: an output with NaN/Inf is judged on them alone, its max_abs not besides
    nonfinite_alone: bool = True
    #: the text of NaN/Inf on one side only ({n}: how many)
    mismatch_text: str = "{n} NaN/Inf values where the reference has none (or the reverse)"
    #: the max_abs bound scales with the reference: ``max_abs > bound * max(1, max|reference|)`` (float
    #: rounding grows with the values rounded: 1e-4 on outputs in the hundreds is a few float32 steps)
    relative: bool = True
    #: a single value's cosine is judged (its sign)
    single_cosine: bool = True
    #: the top-1 agreement is judged
    top1: bool = True


CHECK = Rule()
#: golden outputs: a run's outputs against the baseline's own, NaN/Inf that came or went judged with the rest
GOLDEN = Rule(both_nonfinite=False, nonfinite_alone=False, mismatch_text="{n} NaN/Inf values appeared or went")
#: localize: a tensor diverges beyond bounds scaled to its magnitude; a single value has no cosine
DIVERGENCE = Rule(both_nonfinite=False, nonfinite_alone=False, single_cosine=False, top1=False)
#: a conformance case's outputs against the spec's expected ones (with the case's own tolerance besides)
SPEC = Rule(top1=False, relative=False)


#: each bound's value for outputs that agree exactly
IDEAL = {"nonfinite": 0, "max_abs": 0.0, "max_abs_steps": 0.0, "cosine": 1.0, "top1_agreement": 1.0}


@dataclass(frozen=True)
class Breach:
    """One bound an output (``output`` None: the target's top-1 agreement) is outside of. ``bound``: the
    threshold's name, or ``nonfinite`` for NaN/Inf values."""

    bound: str
    output: str | None
    value: float
    limit: float | None
    text: str

    @property
    def ideal(self) -> float:
        """The bound's value for an output against itself."""
        return IDEAL[self.bound]

    @property
    def message(self) -> str:
        return self.text if self.output is None else f"'{self.output}': {self.text}"


@dataclass(frozen=True)
class Judgement:
    """Outputs against thresholds: the per-output drift, the top-1 agreement, the structural problems, the
    bounds breached; with a tolerance, whether every output is within it and the largest difference it saw."""

    outputs: dict
    agreement: float | None
    problems: tuple[str, ...]
    breaches: tuple[Breach, ...]
    within_tolerance: bool | None = None
    tolerance_max_abs: float | None = None

    @property
    def messages(self) -> list[str]:
        return [b.message for b in self.breaches]

    @property
    def agrees(self) -> bool:
        """Within the tolerance, or comparable and inside every threshold."""
        return bool(self.within_tolerance) or (not self.problems and not self.breaches)


def bound(t: dict, m: dict, rule: Rule = CHECK) -> float | None:
    """The max_abs bound of one output: ``t``'s, times max(1, the reference's largest magnitude
    ``ref_max_abs``) where the rule is relative (a report written before it was measured: ``t``'s)."""
    if t.get("max_abs") is None or not rule.relative:
        return t.get("max_abs")
    return t["max_abs"] * max(1.0, m.get("ref_max_abs") or 0.0)


def judge_output(name: str, m: dict, t: dict, rule: Rule, size: int | None) -> list[Breach]:
    """The bounds one output's drift ``m`` breaches (``size``: how many values it has, where known)."""
    out: list[Breach] = []
    n, both = m.get("nonfinite_mismatch"), m.get("nonfinite")
    if n:
        out.append(Breach("nonfinite", name, n, 0, rule.mismatch_text.format(n=n)))
    elif both and rule.both_nonfinite:
        out.append(Breach("nonfinite", name, both, 0, f"{both} NaN/Inf values, on both sides: no evidence of agreement "
                          "there (non-finite outputs are never a pass; give inputs the model is defined on)"))
    limit = bound(t, m, rule)
    if not (out and rule.nonfinite_alone) and limit is not None and m["max_abs"] > limit:
        out.append(Breach("max_abs", name, m["max_abs"], limit, f"max_abs {m['max_abs']:.3g} > {limit:.3g}"))
    steps, lim = m.get("max_abs_steps"), t.get("max_abs_steps")
    if lim is not None and steps is not None and steps > lim:
        out.append(Breach("max_abs_steps", name, steps, lim, f"max_abs {steps:.2f} quantization steps > {lim:g}"))
    lim = t.get("cosine")
    if lim is not None and m["cosine"] < lim and not n and (rule.single_cosine or size is None or size > 1):
        out.append(Breach("cosine", name, m["cosine"], lim, f"cosine {m['cosine']:.6f} < {lim}"))
    return out


def within(ref: dict, got: dict, stats: dict, rtol: float, atol: float) -> tuple[bool, float]:
    """Whether every compared output is within (rtol, atol), and the largest finite difference (inf where
    NaN/Inf stand on one side only)."""
    within, worst_seen = True, 0.0
    for name in stats:
        r, g = (np.asarray(x[name], dtype=np.float64) for x in (ref, got))
        g = g.reshape(r.shape)
        with np.errstate(all="ignore"):
            d = np.abs(r - g)
            within &= bool(np.isclose(g, r, rtol=rtol, atol=atol, equal_nan=True).all())
        finite = d[np.isfinite(d)]
        worst_seen = max(worst_seen, float(finite.max()) if finite.size else 0.0,
                         float("inf") if np.any(np.isfinite(r) != np.isfinite(g)) else 0.0)
    return within, worst_seen
