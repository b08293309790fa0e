"""The audit's scorecard: per target, the pass rate and the failures by status; failures clustered by the op
a converter or runtime refused and by error message, across models; a row per model; size and latency
summaries. Built from the audit's entries (plain dicts: each model's JSON report targets), rendered as
Markdown here and as a table by the CLI."""
from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict

FAILING = {"drift", "convert-error", "load-error", "run-error", "fallback", "timeout", "crashed"}


def _message_key(msg: str) -> str:
    """An error message with its numbers, paths and quoted names blurred: the same failure across models."""
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", msg or "")
    msg = re.sub(r"(/[\w.\-]+)+", "/…", msg)
    msg = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", msg)
    return " ".join(msg.split())[:120]


def build(entries: list[dict]) -> dict:
    targets: dict[str, Counter] = defaultdict(Counter)
    by_op: dict[tuple[str, str], set] = defaultdict(set)
    by_msg: dict[tuple[str, str], set] = defaultdict(set)
    sizes: dict[str, list] = defaultdict(list)
    p50: dict[str, list] = defaultdict(list)
    rows = []
    for e in entries:
        row = {"path": e["path"], "status": e["status"], "error": e.get("error"),
               "targets": {t["id"]: t["status"] for t in e.get("targets") or []}}
        rows.append(row)
        for t in e.get("targets") or []:
            targets[t["id"]][t["status"]] += 1
            if t["status"] in FAILING:
                if t.get("op"):
                    by_op[(t["id"], t["op"])].add(e["path"])
                by_msg[(t["status"], _message_key(t.get("error") or "; ".join(t.get("breaches") or [])))].add(e["path"])
            size = (t.get("artifact") or {}).get("size_bytes")
            if size:
                sizes[t["id"]].append(size)
            lat = ((t.get("metrics") or {}).get("latency_ms") or {}).get("p50")
            if isinstance(lat, (int, float)):
                p50[t["id"]].append(lat)
    per_target = {}
    for tid, c in sorted(targets.items()):
        ran = sum(n for s, n in c.items() if s != "skipped")
        per_target[tid] = {"models": sum(c.values()), "pass": c.get("pass", 0),
                           "pass_rate": round(c.get("pass", 0) / ran, 4) if ran else None,
                           "by_status": dict(sorted(c.items())),
                           "median_size_bytes": int(statistics.median(sizes[tid])) if sizes[tid] else None,
                           "median_p50_ms": round(statistics.median(p50[tid]), 4) if p50[tid] else None}
    return {
        "models": len(entries),
        "models_passed": sum(e["status"] == "passed" for e in entries),
        "models_unreadable": sum(e["status"] == "error" for e in entries),
        "targets": per_target,
        "failures_by_op": [{"target": t, "op": op, "models": len(ms)} for (t, op), ms in
                           sorted(by_op.items(), key=lambda kv: (-len(kv[1]), kv[0]))],
        "failures_by_message": [{"status": s, "message": m, "models": len(ms)} for (s, m), ms in
                                sorted(by_msg.items(), key=lambda kv: (-len(kv[1]), kv[0]))][:50],
        "rows": rows,
    }


def _pipe(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(card: dict) -> str:
    lines = [f"## portability audit: {card['models_passed']} of {card['models']} models passed", "",
             "| target | pass rate | passed | failures by status | median size | median p50 ms |",
             "|---|--:|--:|---|--:|--:|"]
    for tid, t in card["targets"].items():
        fails = ", ".join(f"{s} {n}" for s, n in t["by_status"].items() if s not in ("pass", "skipped")) or "–"
        rate = "–" if t["pass_rate"] is None else f"{t['pass_rate']:.0%}"
        size = "–" if t["median_size_bytes"] is None else f"{t['median_size_bytes'] / 1024:.1f} KB"
        lat = "–" if t["median_p50_ms"] is None else f"{t['median_p50_ms']:.3g}"
        lines.append(f"| `{tid}` | {rate} | {t['pass']}/{t['models']} | {fails} | {size} | {lat} |")
    if card["failures_by_op"]:
        lines += ["", "### Failures by op", "", "| target | op | models |", "|---|---|--:|"]
        lines += [f"| `{f['target']}` | `{f['op']}` | {f['models']} |" for f in card["failures_by_op"]]
    if card["failures_by_message"]:
        lines += ["", "### Failures by message", "", "| status | message | models |", "|---|---|--:|"]
        lines += [f"| {f['status']} | {_pipe(f['message'])} | {f['models']} |" for f in card["failures_by_message"]]
    lines += ["", "### Models", ""]
    lines += [f"- {'✅' if r['status'] == 'passed' else '❌'} `{r['path']}` {r['status']}"
              + (f": {r['error']}" if r.get("error") else "") for r in card["rows"]]
    return "\n".join(lines) + "\n"
