"""The study's views in their order (the findings first, the spread over seeds when there are several, then
each table), rendered to Markdown and to the terminal (rich)."""
from __future__ import annotations

from portability.study.seed_tables import same_weights, seeds
from portability.study.tables import (View, deployed_accuracy, drift, failures, findings, framework_accuracy, latency,
                                      robustness, robustness_moves, sizes)


def views(study: dict) -> list[View]:
    from portability.study.stats import own_rows

    many = (study.get("options") or {}).get("seeds", 1) > 1
    weights = same_weights(study)
    verdicts = findings(study)
    study = {**study, "rows": own_rows(study)}
    first = [framework_accuracy(study), *deployed_accuracy(study), *drift(study), *sizes(study), *latency(study),
             *robustness(study)]
    if many:  # the robustness moves, the failures and the same weights' first table are over every seed
        for v in first + weights[1:]:
            v.notes.append("with several seeds, this table shows each cell's first seed; the spread is under 'Across seeds'")
    return [verdicts] + ([*seeds(study)] if many else []) + first + [*robustness_moves(study), failures(study)] + weights


def to_markdown(study: dict) -> str:
    o = study["options"]
    n = o.get("seeds") or 1
    seeds = f"seed {o['seed']}" if n == 1 else f"{n} seeds, {o['seed']}–{o['seed'] + n - 1}"
    lines = [f"# portability study ({o['profile']} profile, {seeds})", "",
             f"Frameworks: {', '.join(o['frameworks'])} · models: {', '.join(o['models'])} · datasets: "
             f"{', '.join(o['datasets'])} · targets: `{o['targets']}` · {study['started_at']}", ""]
    if study.get("partial"):
        lines += [f"**Partial**: {len(study['rows'])} of {study.get('rows_planned') or '?'} rows — the study stopped "
                  "midway (run it again with the same settings: it resumes).", ""]
    s = study.get("seconds") or {}
    if s:
        lines += [f"Wall time: {s.get('total', 0):.0f} s (training {s.get('train', 0):.0f} s, deployment and evaluation "
                  f"{s.get('check', 0):.0f} s)" + (f"; from scratch, over every run that did a part of it: "
                  f"{s['from_scratch']:.0f} s" if s.get("from_scratch") and s["from_scratch"] > s.get("total", 0) + 1 else "") + ".", ""]
    for v in views(study):
        lines += [f"## {v.title}", "", "| " + " | ".join(v.header) + " |", "|" + "---|" * len(v.header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in v.rows]
        lines += [""] + [f"- {n}" for n in v.notes] + ([""] if v.notes else [])
    return "\n".join(lines) + "\n"


def render(study: dict, console) -> None:
    from rich.table import Table

    for v in views(study):
        console.print(f"\n[bold]{v.title}[/]", highlight=False, soft_wrap=True)
        t = Table(show_lines=False)
        for i, h in enumerate(v.header):
            t.add_column(h, justify="left" if i == 0 or h in ("dataset",) else "right", no_wrap=i == 0)
        for row in v.rows:
            t.add_row(*row)
        console.print(t)
        for n in v.notes:
            console.print(f"  {n}", highlight=False, soft_wrap=True)
