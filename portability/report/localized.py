"""What ``check --localize`` and ``check --fix`` found, in the terminal, the Markdown summary and the HTML
report: per drifting target, the first diverging node, whether its inputs were clean, the reproducer and the
drift curve; per failing target, the alternatives tried and the one that passes."""
from __future__ import annotations

from portability.report.schema import Report


def found(report: Report) -> list[tuple[str, dict]]:
    return [(t.id, t.details["localize"]) for t in report.targets if (t.details or {}).get("localize")]


def fixes(report: Report) -> list[tuple[str, dict]]:
    return [(t.id, t.details["fix"]) for t in report.targets if (t.details or {}).get("fix")]


def quantized(report: Report) -> list[tuple[str, dict]]:
    """Per target, its quantization report (``check --localize``) or the one its ``--fix`` search made."""
    out = []
    for t in report.targets:
        d = t.details or {}
        q = d.get("quantization") or (d.get("fix") or {}).get("quantization")
        if q and q.get("layers"):
            out.append((t.id, q))
    return out


def _sensitivity_svg(doc: dict, most: int = 16) -> str | None:
    """A bar per layer (worst first): the model's output SNR with that layer alone quantized."""
    from portability.report.plots import KIT

    rows = [x for x in doc["layers"] if x.get("sensitivity_db") is not None][:most]
    if not rows:
        return None
    fig, ax = KIT.figure(len(rows))
    names = [x["node"] + (" *" if x.get("outlier_channels") else "") for x in rows][::-1]
    vals = [x["sensitivity_db"] for x in rows][::-1]
    ax.barh(names, vals, color=["#c62828" if v < 20 else "#ef6c00" if v < 35 else "#2e7d32" for v in vals])
    ax.set_xlabel("output SNR with the layer alone quantized (dB; * an outlier channel)")
    return KIT.svg(fig, f"quantization sensitivity per layer on {doc['target']}")


def fix_line(doc: dict) -> str:
    tried = ", ".join(f"{x['alternative']}: {x['status']}" for x in doc.get("tried", []))
    ok = doc.get("passing")
    if ok:
        return f"passes with {ok['alternative']} — set {ok['option']}" + (f" (or: {ok['command']})" if ok.get("command") else "")
    return f"no alternative passes ({tried or doc.get('why', 'none applies')})"


def line(doc: dict) -> str:
    """One sentence: the node, the blame, the reproducer (or why nothing was localized)."""
    if doc.get("error"):
        return f"not localized: {doc['error']}"
    first = doc.get("first_divergence")
    if not first:
        return f"no single node localized: {doc.get('why', '')}"
    what = {"error": "first failing node", "constant": "output stops following the input at"}.get(doc.get("mode"), "first diverging node")
    blame = "its inputs agree (the op itself)" if first.get("op_at_fault") else "its inputs differ already"
    rep = doc.get("reproducer") or {}
    tail = (f"; reproducer {rep['model']} ({'reproduces' if rep.get('reproduces') else 'does not reproduce'} by itself)"
            if rep.get("model") else "")
    return f"{what} {first.get('node') or '(unnamed)'} ({first['op_type']}, #{first['index']} of {doc['nodes']}): {blame}{tail}"


def _curve_svg(doc: dict) -> str | None:
    from portability.report.plots import KIT

    pts = [(c["index"], c["ratio"]) for c in doc.get("curve", []) if KIT.finite(c.get("ratio")) is not None]
    if len(pts) < 2:
        return None
    fig, ax = KIT.figure(6)
    xs, ys = zip(*pts)
    ax.plot(xs, [max(y, KIT.ZERO_FLOOR) for y in ys], marker="o", color=KIT.REFERENCE_COLOR)
    ax.set_yscale("log")
    ax.axhline(1.0, color="#c62828", linestyle="--", linewidth=1)
    first = doc.get("first_divergence")
    if first and first.get("ratio"):
        ax.plot([first["index"]], [max(first["ratio"], KIT.ZERO_FLOOR)], marker="o", markersize=11, color="#c62828")
    ax.set_xlabel("node (topological order)")
    ax.set_ylabel("drift / bound")
    return KIT.svg(fig, f"drift along the graph on {doc['target']}")


def html(report: Report, e) -> str | None:
    """The HTML section (``e`` escapes text), or None when nothing was localized or searched."""
    docs = found(report)
    if not docs and not fixes(report) and not quantized(report):
        return None
    parts = [f"<h3>{e(tid)}: --fix</h3><p>{e(fix_line(doc))}</p>" for tid, doc in fixes(report)]
    for tid, q in quantized(report):
        svg = _sensitivity_svg(q)
        parts.append(f"<h3>{e(tid)}: where the quantization error comes from</h3>"
                     + (f"<figure><figcaption>Each layer alone quantized: the model's output SNR (red below 20 dB: "
                        f"that layer alone breaks the output)</figcaption>{svg}</figure>" if svg else ""))
    for tid, doc in docs:
        svg = None if doc.get("error") else _curve_svg(doc)
        parts.append(f"<h3>{e(tid)}</h3><p>{e(line(doc))}</p>"
                     + (f"<figure><figcaption>Drift over the target's bound along the graph (above the dashed line: "
                        f"diverging; the first diverging node circled)</figcaption>{svg}</figure>" if svg else "")
                     + (f"<p class=meta>Per-node drift for Model Explorer: <code>{e(doc['node_data'])}</code></p>"
                        if doc.get("node_data") else ""))
    return "".join(parts)
