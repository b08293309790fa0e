"""``portability targets``: every target id, whether it can run here, and how to make it run."""
from __future__ import annotations

import typer


def targets(
    json_out: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> int:
    """List the target ids and their availability on this machine."""
    import json

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from portability.targets import availability, registry

    rows = []
    for t in registry().values():
        a = availability(t)
        rows.append({"id": t.id, "available": a.ok, "gating": t.gating, "reason": a.reason or None,
                     "hint": a.hint if not a.ok else None, "description": t.description})
    if json_out:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table("target", "here", "gating", "what it is / how to enable")
    for r in rows:
        how = r["description"] if r["available"] else f"{r['reason']} — fix: {r['hint']}"
        how = escape(how)  # a hint's 'portability[extra]' is not markup
        table.add_row(r["id"], "yes" if r["available"] else "[dim]no[/]", "yes" if r["gating"] else "x-check", how)
    Console().print(table)
    return 0
