"""Generation (``check --generate N``): a target's greedy tokens against the reference's, step by step.

Per target: the tokens it generated, how many match the reference's before the first divergence, that step
and the reference's top-1/top-2 margin there, and the drift of the logits under teacher forcing (each step fed the reference's token: no compounding),
judged by the one judge against the target's ``max_abs`` and ``cosine`` bounds. Only where the check
generated: a report without ``--generate`` has no ``generation`` field. A divergence is a *tie* where the
reference's margin there is within twice the target's float tolerance (``max_abs``, per unit of the logits'
magnitude over 1): a drift the target is allowed could flip it.
"""
from __future__ import annotations

import numpy as np

from portability.metrics.base import Column, Moved, Section

FIELDS: dict = {}
THRESHOLDS: dict = {}
#: what --baseline calls noise: a drop of matched tokens by more than this
TOLERANCES = {"tokens_drop": 0}
REGRESSION_KINDS = ("generation",)


def compare(ref: dict, got: dict, max_abs: float | None = None) -> dict:
    """The report's ``generation`` of a target (``got``) against the reference (``ref``): each a loaded
    ``generation.npz`` (``tokens``, ``logits``; ``forced_logits`` for a target fed the reference's tokens).
    ``max_abs``: the target's float tolerance (per unit of the logits' magnitude over 1); a divergence where the
    reference's margin is within twice it is a tie."""
    rt, gt = [int(x) for x in ref["tokens"]], [int(x) for x in got["tokens"]]
    n = min(len(rt), len(gt))
    first = next((i for i in range(n) if rt[i] != gt[i]), None if len(rt) == len(gt) else n)
    forced = got.get("forced_logits")
    rl = np.asarray(ref["logits"], np.float64)
    out: dict = {"tokens": gt, "reference_tokens": rt, "matched": first if first is not None else len(rt),
                 "first_divergence": first, "margin": None, "tie": False, "teacher_forced": None,
                 "logit_scale": float(max(1.0, np.abs(rl).max())) if rl.size else 1.0}
    if forced is not None and len(forced) == len(rl):
        fl = np.asarray(forced, np.float64)
        diff = np.abs(fl - rl)
        cos = [float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))) if np.linalg.norm(a) and np.linalg.norm(b)
               else 1.0 for a, b in zip(rl, fl)]
        out["teacher_forced"] = {"max_abs": float(diff.max()) if diff.size else 0.0, "cosine": min(cos) if cos else 1.0,
                                 "max_abs_per_step": [round(float(d), 8) for d in diff.max(axis=1)]}
    if first is not None and first < len(rl):
        top = np.sort(rl[first])[-2:]
        out["margin"] = float(top[1] - top[0]) if top.size == 2 else None
        tol = (max_abs or 0.0) * out["logit_scale"]
        out["tie"] = bool(out["margin"] is not None and out["margin"] <= 2 * tol)
    return out


def compute(ev) -> tuple[dict, list[str]]:
    gen, ref = getattr(ev, "generation", None), getattr(ev, "reference_generation", None)
    if gen is None:
        return {}, []
    if ev.is_reference or ref is None:
        tokens = [int(x) for x in gen["tokens"]]
        return {"generation": {"tokens": tokens, "reference_tokens": tokens, "matched": len(tokens),
                               "first_divergence": None, "margin": None, "tie": False, "teacher_forced": None,
                               **_speed(ev)}}, []
    return {"generation": {**compare(ref, gen, (ev.thresholds or {}).get("max_abs")), **_speed(ev)}}, []


def _speed(ev) -> dict:
    """Time to first token and tokens/s; missing, with the reason, where the target's latency is not timed
    (an emulator's or a software GPU adapter's speed is no device's: ``--time-emulated`` times it)."""
    skipped = (ev.worker.latency or {}).get("skipped")
    if skipped:
        return {"ttft_ms": None, "tokens_per_s": None, "speed_skipped": skipped}
    g = (ev.worker.details or {}).get("generation") or {}
    return {"ttft_ms": g.get("ttft_ms"), "tokens_per_s": g.get("tokens_per_s")}


def breaches(metrics: dict, t: dict) -> list[str]:
    g = metrics.get("generation")
    if not g or g.get("first_divergence") is None and not g.get("teacher_forced"):
        return []
    out = []
    k = g.get("first_divergence")
    if k is not None and not g.get("tie"):
        ref, got = g["reference_tokens"], g["tokens"]
        out.append(f"generation diverges at step {k}: token {got[k] if k < len(got) else '–'} where the reference "
                   f"has {ref[k] if k < len(ref) else '–'} (reference margin {_num(g.get('margin'))}); "
                   f"{g['matched']} of {len(ref)} tokens match")
    tf = g.get("teacher_forced") or {}
    bound = t["max_abs"] * max(1.0, _scale(g)) if t.get("max_abs") is not None else None
    if tf and bound is not None and tf.get("max_abs", 0) > bound:  # said with the bound it was judged by (scaled)
        out.append(f"generation: teacher-forced logits max_abs {tf['max_abs']:.3g} > {bound:.3g}"
                   + (f" ({t['max_abs']} x the logits' magnitude {_scale(g):.3g})" if _scale(g) > 1 else ""))
    if tf and t.get("cosine") is not None and tf.get("cosine", 1.0) < t["cosine"]:
        out.append(f"generation: teacher-forced logits cosine {tf['cosine']:.6f} < {t['cosine']}")
    return out


def _scale(g: dict) -> float:
    """The bound is per unit of the logits' magnitude where that is over 1, as the single pass's is."""
    return float(g.get("logit_scale") or 1.0)


def _num(x) -> str:
    return "–" if x is None else f"{x:.3g}"


def regressions(before, after, tol) -> list[Moved]:
    a, b = ((t.metrics or {}).get("generation") for t in (before, after))
    if not a or not b or b.get("matched", 0) >= a.get("matched", 0) - tol.tokens_drop:
        return []
    return [Moved("generation", "generation.matched", a["matched"], b["matched"], True,
                  f"tokens matched {a['matched']} → {b['matched']}")]


def _cell(t, medium: str) -> str:
    g = (t.metrics or {}).get("generation")
    if not g:
        return "–"
    n = len(g.get("reference_tokens") or [])
    return f"{g['matched']}/{n}" + (" tie" if g.get("tie") else "")


COLUMNS = (Column("tokens", _cell, shown=lambda r: any((t.metrics or {}).get("generation") for t in r.targets)),)


def _bar(matched: int, n: int) -> str:
    """A tokens-matched bar: the share of the reference's tokens matched before the first divergence."""
    share = matched / n if n else 1.0
    colour = "#43a047" if share == 1 else "#fb8c00"
    return (f'<span style="display:inline-block;width:8em;height:0.8em;background:#e0e0e0;vertical-align:middle">'
            f'<span style="display:block;height:100%;width:{share:.0%};background:{colour}"></span></span> {matched}/{n}')


def _tokens(ids: list[int], at: int | None, page) -> str:
    """Token ids, the first divergent one marked."""
    return " ".join(f'<b style="color:#c62828">{page.e(str(t))}</b>' if i == at else page.e(str(t)) for i, t in enumerate(ids))


def _section(report, page) -> str:
    rows = []
    for t in report.targets:
        g = (t.metrics or {}).get("generation")
        if not g:
            continue
        n, k = len(g.get("reference_tokens") or []), g.get("first_divergence")
        tf = g.get("teacher_forced") or {}
        rows.append([page.e(t.id), _bar(g.get("matched", 0), n) + (" (tie)" if g.get("tie") else ""),
                     "–" if k is None else str(k), page.num(g.get("margin"), ".3g"), page.num(tf.get("max_abs"), ".3g"),
                     page.num(tf.get("cosine"), ".6f"), page.num(g.get("ttft_ms"), ".2f"), page.num(g.get("tokens_per_s"), ".1f"),
                     _tokens(g.get("tokens") or [], k, page)])
    if not rows:
        return ""
    ref = next(((t.metrics or {}).get("generation") or {}).get("reference_tokens") for t in report.targets
               if (t.metrics or {}).get("generation"))
    head = f"<p class=meta>The reference's tokens: {page.e(' '.join(map(str, ref or [])))}.</p>"
    return head + page.table(["target", "tokens matched", "first divergence", "margin there", "teacher-forced max |Δ|",
                              "teacher-forced cosine", "first token ms", "tokens/s", "tokens (the first divergent marked)"],
                             rows, numeric_from=2)


SECTIONS = (Section("Generation", _section),)
