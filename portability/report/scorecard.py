"""The audit's scorecard: per target, the pass rate and the failures by status; failures clustered by the op
a converter or runtime refused and by error message, across models; a row per model; size and latency
summaries; for a conformance corpus, the ops x targets table. Built from the audit's entries (each model's
``ModelResult``: its status and its JSON report targets), rendered as Markdown and HTML here and as a table by the CLI;
:func:`diff` compares two audits (``audit --baseline``)."""
from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from typing import Any

from portability.core.status import FAILING, Status

#: an audit's result for one model (``audit.unit.ModelResult``: path, name, op, status, error, targets,
#: ``passed``, ``refused``); the audit stands on the report, not the other way round
ModelResult = Any

#: a conformance cell that is no target's status: the case could not be checked at all
UNCHECKED = "error"
#: a conformance cell: the target matched the reference, not the spec's expected outputs
SPEC_DRIFT = "spec-drift"
#: the statuses a failure count leaves out
_NOT_FAILURES = (Status.PASS, Status.SKIPPED)


def _message_key(msg: str) -> str:
    """An error message with its numbers, paths and quoted names blurred: the same failure across models."""
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", msg or "")
    msg = re.sub(r"(/[\w.\-]+)+", "/…", msg)
    msg = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", msg)
    return " ".join(msg.split())[:120]


def build(entries: list[ModelResult]) -> dict:
    targets: dict[str, Counter] = defaultdict(Counter)
    by_op: dict[tuple[str, str], set] = defaultdict(set)
    by_msg: dict[tuple[str, str], set] = defaultdict(set)
    sizes: dict[str, list] = defaultdict(list)
    p50: dict[str, list] = defaultdict(list)
    rows = []
    for e in entries:
        row = {"path": e.path, "status": e.status, "error": e.error,
               "targets": {t["id"]: t["status"] for t in e.targets},
               **{k: getattr(e, k) for k in ("name", "op") if getattr(e, k)}}
        rows.append(row)
        for t in e.targets:
            targets[t["id"]][t["status"]] += 1
            if t["status"] in FAILING:
                if t.get("op"):
                    by_op[(t["id"], t["op"])].add(e.path)
                by_msg[(t["status"], _message_key(t.get("error") or "; ".join(t.get("breaches") or [])))].add(e.path)
            size = (t.get("artifact") or {}).get("size_bytes")
            if size:
                sizes[t["id"]].append(size)
            lat = ((t.get("metrics") or {}).get("latency_ms") or {}).get("p50")
            if isinstance(lat, (int, float)):
                p50[t["id"]].append(lat)
    per_target = {}
    for tid, c in sorted(targets.items()):
        ran = sum(n for s, n in c.items() if s != Status.SKIPPED)
        per_target[tid] = {"models": sum(c.values()), "pass": c.get(Status.PASS, 0),
                           "pass_rate": round(c.get(Status.PASS, 0) / ran, 4) if ran else None,
                           "by_status": dict(sorted(c.items())),
                           "median_size_bytes": int(statistics.median(sizes[tid])) if sizes[tid] else None,
                           "median_p50_ms": round(statistics.median(p50[tid]), 4) if p50[tid] else None}
    return {
        "models": len(entries),
        "models_passed": sum(e.passed for e in entries),
        "models_unreadable": sum(e.refused for e in entries),
        "targets": per_target,
        "failures_by_op": [{"target": t, "op": op, "models": len(ms)} for (t, op), ms in
                           sorted(by_op.items(), key=lambda kv: (-len(kv[1]), kv[0]))],
        "failures_by_message": [{"status": s, "message": m, "models": len(ms)} for (s, m), ms in
                                sorted(by_msg.items(), key=lambda kv: (-len(kv[1]), kv[0]))][:50],
        "rows": rows,
        **({"conformance": conformance(entries)} if any(e.op for e in entries) else {}),
    }


def cell(entry: ModelResult, t: dict | None) -> str:
    """A conformance case on one target: ``pass`` (ran, matched the reference and the spec), ``spec-drift``
    (matched the reference, not the spec's expected outputs), the target's failing status, or ``error``
    (the case could not be checked at all)."""
    if entry.refused or t is None:
        return UNCHECKED
    if t["status"] != Status.PASS:
        return t["status"]
    spec = t.get("spec")
    return SPEC_DRIFT if spec is not None and not spec.get("agrees") else Status.PASS


def conformance(entries: list[ModelResult]) -> dict:
    """The ops x targets table: per op and target, its cases and how many passed (and the other cells by
    kind); per target, the op types all of whose cases passed."""
    cases = [e for e in entries if e.op]
    tids: list[str] = []
    for e in cases:
        for t in e.targets:
            if t["id"] not in tids:
                tids.append(t["id"])
    ops: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for e in cases:
        got = {t["id"]: t for t in e.targets}
        for tid in tids:
            ops[e.op][tid][cell(e, got.get(tid))] += 1
    table = {op: {tid: {"cases": sum(c.values()), "pass": c.get(Status.PASS, 0), "cells": dict(sorted(c.items()))}
                  for tid, c in per.items()} for op, per in sorted(ops.items(), key=lambda kv: kv[0].lower())}
    summary = {}
    for tid in tids:  # an op counts for a target where one of its cases ran there (not skipped, not unreadable)
        ran = [v[tid] for v in table.values()
               if v[tid]["cells"].get(Status.SKIPPED, 0) + v[tid]["cells"].get(UNCHECKED, 0) < v[tid]["cases"]]
        summary[tid] = {"ops": len(ran), "ops_passing": sum(c["pass"] == c["cases"] for c in ran),
                        "cases": sum(c["cases"] for c in ran), "cases_passing": sum(c["pass"] for c in ran)}
    return {"ops": table, "targets": summary, "cases": len(cases),
            "unreadable": sum(e.refused for e in cases)}


#: latency ratios (new / old p50) into buckets, as run-to-run scorecards report them
BUCKETS = ((0.5, "2x faster or more"), (0.8, "1.25-2x faster"), (1.25, "within 25%"), (2.0, "1.25-2x slower"),
           (float("inf"), "2x slower or more"))


def _bucket(ratio: float) -> str:
    return next(name for top, name in BUCKETS if ratio < top)


def _key(e: ModelResult) -> str:
    return e.name or e.path


def diff(old: list[ModelResult], new: list[ModelResult]) -> dict:
    """What changed between two audits' entries, model by model and target by target: ``worse`` (passed
    before, fails now), ``fixed`` (the reverse), other status changes, models added and gone, and every
    target's latency change (p50, new/old) counted by bucket, with the largest moves listed."""
    before = {_key(e): e for e in old}
    worse, fixed, changed, moves = [], [], [], []
    buckets: Counter = Counter()
    for e in new:
        o = before.get(_key(e))
        if o is None:
            continue
        ot = {t["id"]: t for t in o.targets}
        if o.refused and not e.refused:
            fixed.append({"model": _key(e), "target": None, "was": o.status, "now": e.status})
        elif e.refused and not o.refused:
            worse.append({"model": _key(e), "target": None, "was": o.status, "now": e.status, "why": e.error})
        for t in e.targets:
            was = ot.get(t["id"])
            if was is None:
                continue
            a, b = was["status"], t["status"]
            row = {"model": _key(e), "target": t["id"], "was": a, "now": b}
            if a == Status.PASS and b in FAILING:
                worse.append({**row, "why": t.get("error") or "; ".join(t.get("breaches") or [])})
            elif a in FAILING and b == Status.PASS:
                fixed.append(row)
            elif a != b:
                changed.append(row)
            la = ((was.get("metrics") or {}).get("latency_ms") or {}).get("p50")
            lb = ((t.get("metrics") or {}).get("latency_ms") or {}).get("p50")
            if isinstance(la, (int, float)) and isinstance(lb, (int, float)) and la > 0:
                r = lb / la
                buckets[_bucket(r)] += 1
                moves.append({"model": _key(e), "target": t["id"], "was_ms": la, "now_ms": lb, "ratio": round(r, 3)})
    moves.sort(key=lambda m: -abs(__import__("math").log(max(m["ratio"], 1e-9))))
    now = {_key(e) for e in new}
    return {"worse": worse, "fixed": fixed, "changed": changed,
            "models_added": sorted(now - set(before)), "models_gone": sorted(set(before) - now),
            "latency": {name: buckets.get(name, 0) for _, name in BUCKETS}, "latency_moves": moves[:20]}


def _pipe(text: str) -> str:
    return text.replace("|", "\\|")


def _target_cells(t: dict) -> tuple[str, str, str, str, str]:
    """A target's row of the scorecard, as text both renderers format: (pass rate, passed of models, failures
    by status, median size, median p50 ms), ``–`` where there is none."""
    fails = ", ".join(f"{s} {n}" for s, n in t["by_status"].items() if s not in _NOT_FAILURES) or "–"
    rate = "–" if t["pass_rate"] is None else f"{t['pass_rate']:.0%}"
    size = "–" if t["median_size_bytes"] is None else f"{t['median_size_bytes'] / 1024:.1f} KB"
    lat = "–" if t["median_p50_ms"] is None else f"{t['median_p50_ms']:.3g}"
    return rate, f"{t['pass']}/{t['models']}", fails, size, lat


def markdown(card: dict) -> str:
    lines = [f"## portability audit: {card['models_passed']} of {card['models']} models passed", "",
             "| target | pass rate | passed | failures by status | median size | median p50 ms |",
             "|---|--:|--:|---|--:|--:|"]
    for tid, t in card["targets"].items():
        rate, passed, fails, size, lat = _target_cells(t)
        lines.append(f"| `{tid}` | {rate} | {passed} | {fails} | {size} | {lat} |")
    if card["failures_by_op"]:
        lines += ["", "### Failures by op", "", "| target | op | models |", "|---|---|--:|"]
        lines += [f"| `{f['target']}` | `{f['op']}` | {f['models']} |" for f in card["failures_by_op"]]
    if card["failures_by_message"]:
        lines += ["", "### Failures by message", "", "| status | message | models |", "|---|---|--:|"]
        lines += [f"| {f['status']} | {_pipe(f['message'])} | {f['models']} |" for f in card["failures_by_message"]]
    if card.get("conformance"):
        lines += ["", conformance_markdown(card["conformance"]).rstrip()]
    lines += ["", "### Models", ""]
    lines += [f"- {'✅' if r['status'] == Status.PASS else '❌'} `{r['path']}` {r['status']}"
              + (f": {r['error']}" if r.get("error") else "") for r in card["rows"]]
    return "\n".join(lines) + "\n"


def conformance_markdown(conf: dict) -> str:
    """The ops x targets table: a cell per op and target, ``k/n`` cases that passed, with the most common
    other kind of cell named."""
    tids = list(conf["targets"])
    short = [t.split("/", 1)[-1] for t in tids]
    lines = [f"### ONNX conformance: {conf['cases']} cases, {len(conf['ops'])} op types", "",
             "| target | op types all passing | cases passing |", "|---|--:|--:|"]
    for tid, t in conf["targets"].items():
        lines.append(f"| `{tid}` | {t['ops_passing']}/{t['ops']} | {t['cases_passing']}/{t['cases']} |")
    lines += ["", "| op | " + " | ".join(short) + " |", "|---|" + "---|" * len(tids)]
    for op, per in conf["ops"].items():
        cells = []
        for tid in tids:
            c = per.get(tid)
            if c is None:
                cells.append("–")
                continue
            other = sorted(((n, k) for k, n in c["cells"].items() if k != Status.PASS), reverse=True)
            mark = "✅" if c["pass"] == c["cases"] else "⏭" if c["cells"].get(Status.SKIPPED) == c["cases"] else "❌"
            cells.append(f"{mark} {c['pass']}/{c['cases']}" + (f" {other[0][1]}" if other and c["pass"] < c["cases"] else ""))
        lines.append(f"| `{op}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def diff_markdown(d: dict) -> str:
    lines = [f"### Against the baseline: {len(d['worse'])} worse, {len(d['fixed'])} fixed, {len(d['changed'])} other changes", ""]
    for title, rows in (("Worse", d["worse"]), ("Fixed", d["fixed"]), ("Changed", d["changed"])):
        if rows:
            lines += [f"**{title}**", ""] + [f"- `{r['model']}` {r['target'] or '(the model)'}: {r['was']} → {r['now']}"
                                             + (f" ({_pipe(r['why'])})" if r.get("why") else "") for r in rows] + [""]
    lines += ["| latency (p50, now/before) | targets |", "|---|--:|"] + [f"| {k} | {n} |" for k, n in d["latency"].items()]
    if d["models_added"] or d["models_gone"]:
        lines += ["", f"Models added: {len(d['models_added'])}; gone: {len(d['models_gone'])}."]
    return "\n".join(lines) + "\n"


_CSS = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f3f3f3}td.n{text-align:right}
.pass{background:#dcf5dc}.fail{background:#f8d7d7}.skip{background:#eee;color:#777}.spec{background:#fde9c8}
h1{font-size:1.4em}code{font-size:90%}"""


def _h(v) -> str:
    import html as _html

    return _html.escape(str(v), quote=True)


#: the CSS class of a passing row or cell
_CSS_PASS = "pass"
#: a cell's or a status's CSS class (``fail`` for every other)
_CLASS = {Status.PASS: _CSS_PASS, Status.SKIPPED: "skip", SPEC_DRIFT: "spec"}


def _cls(status: str) -> str:
    return _CLASS.get(status, "fail")


def html(card: dict, links: dict[str, str] | None = None, d: dict | None = None) -> str:
    """The scorecard as one self-contained page; ``links``: a model's path -> its own report's address."""
    links = links or {}
    out = [f"<!doctype html><meta charset=utf-8><title>portability audit</title><style>{_CSS}</style>",
           f"<h1>portability audit: {card['models_passed']} of {card['models']} models passed</h1>",
           "<table><tr><th>target<th>pass rate<th>passed<th>failures by status<th>median size<th>median p50 ms"]
    for tid, t in card["targets"].items():
        rate, passed, fails, size, lat = _target_cells(t)
        out.append(f"<tr><td><code>{_h(tid)}</code><td class=n>{rate}<td class=n>{passed}"
                   f"<td>{_h(fails)}<td class=n>{size}<td class=n>{lat}")
    out.append("</table>")
    if d is not None:
        out.append(f"<h2>Against the baseline: {len(d['worse'])} worse, {len(d['fixed'])} fixed</h2><ul>")
        out += [f"<li class={'fail' if r in d['worse'] else _CSS_PASS}><code>{_h(r['model'])}</code> {_h(r['target'] or '(the model)')}: "
                f"{_h(r['was'])} → {_h(r['now'])}" for r in d["worse"] + d["fixed"]]
        out.append("</ul><table><tr><th>latency (p50, now/before)<th>targets")
        out += [f"<tr><td>{_h(k)}<td class=n>{n}" for k, n in d["latency"].items()]
        out.append("</table>")
    conf = card.get("conformance")
    if conf:
        tids = list(conf["targets"])
        out.append(f"<h2>ONNX conformance: {conf['cases']} cases, {len(conf['ops'])} op types</h2><table><tr><th>op")
        out += [f"<th>{_h(t.split('/', 1)[-1])}" for t in tids]
        out.append("<tr><th>op types all passing" + "".join(f"<th>{conf['targets'][t]['ops_passing']}/{conf['targets'][t]['ops']}" for t in tids))
        for op, per in conf["ops"].items():
            out.append(f"<tr><td><code>{_h(op)}</code>")
            for t in tids:
                c = per.get(t) or {"cases": 0, "pass": 0, "cells": {}}
                kind = Status.PASS if c["pass"] == c["cases"] else Status.SKIPPED if c["cells"].get(Status.SKIPPED) == c["cases"] else \
                    max((k for k in c["cells"] if k != Status.PASS), key=lambda k: c["cells"][k])
                out.append(f"<td class={_cls(kind)} title='{_h(c['cells'])}'>{c['pass']}/{c['cases']}")
        out.append("</table>")
    if card["failures_by_op"]:
        out.append("<h2>Failures by op</h2><table><tr><th>target<th>op<th>models")
        out += [f"<tr><td><code>{_h(f['target'])}</code><td><code>{_h(f['op'])}</code><td class=n>{f['models']}"
                for f in card["failures_by_op"]]
        out.append("</table>")
    if card["failures_by_message"]:
        out.append("<h2>Failures by message</h2><table><tr><th>status<th>message<th>models")
        out += [f"<tr><td>{_h(f['status'])}<td>{_h(f['message'])}<td class=n>{f['models']}" for f in card["failures_by_message"]]
        out.append("</table>")
    tids = list(card["targets"])
    out.append("<h2>Models</h2><table><tr><th>model<th>status" + "".join(f"<th>{_h(t)}" for t in tids))
    for r in card["rows"]:
        name = r.get("name") or r["path"].rsplit("/", 1)[-1]
        link = links.get(r["path"])
        label = f"<a href='{_h(link)}'>{_h(name)}</a>" if link else _h(name)
        out.append(f"<tr><td title='{_h(r['path'])}'>{label}<td class={_cls(r['status'])}>{_h(r['status'])}"
                   + (f": {_h(r['error'])}" if r.get("error") else "")
                   + "".join(f"<td class={_cls(r['targets'].get(t, Status.SKIPPED))}>{_h(r['targets'].get(t, '–'))}" for t in tids))
    out.append("</table>")
    return "\n".join(out) + "\n"
