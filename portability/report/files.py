"""Report files: JSON (schema v1) and JUnit XML, each written atomically (temp file + rename)."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from portability.core.status import Status
from portability.report.schema import Report


def _clean(v):
    """JSON has no Infinity/NaN: write them as strings so every JSON parser reads the report."""
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else "-inf" if v < 0 else "nan"
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def write_atomic(path: Path, text: str) -> None:
    write_atomic_bytes(path, text.encode())


def write_atomic_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def to_json(report: Report) -> str:
    return json.dumps(_clean(report.to_dict()), indent=2) + "\n"


def write_json(report: Report, path: Path) -> None:
    write_atomic(path, to_json(report))


def _junit_out(t) -> str:
    """The numbers a CI page shows under a test case: drift, agreement, accuracy, size, latency."""
    from portability.metrics.drift import agreement, worst

    m = t.metrics or {}
    max_abs, cos = worst(t)
    lat = m.get("latency_ms") or {}
    parts = [f"status={t.status}", f"gating={str(t.gating).lower()}", f"runtime={t.runtime}"]
    parts += [f"{k}={v}" for k, v in (("max_abs", max_abs), ("cosine", cos), ("top1_agreement", agreement(t)),
                                       ("accuracy", m.get("accuracy")), ("size_bytes", (t.artifact or {}).get("size_bytes")),
                                       ("p50_ms", lat.get("p50")), ("p50_vs_reference", m.get("p50_vs_reference")))
              if v is not None]
    return " ".join(parts)


def to_junit(report: Report) -> str:
    """One testcase per target: failures for failing gating targets, skipped for skipped (and for
    failing cross-checks, which never fail a CI run by default). Valid against both the strict
    Jenkins/Ant JUnit schema (where ``<skipped>`` holds its reason as text) and the xUnit/Surefire one
    (tests/schemas/)."""
    cases = []
    failures = skipped = 0
    for t in report.targets:
        why = "; ".join(([t.error] if t.error else []) + list(t.breaches)) or t.status
        body = ""
        if t.status == Status.SKIPPED or (t.failed and not t.gating):
            skipped += 1
            body = f"<skipped>{escape(f'{t.status}: {why}')}</skipped>"
        elif t.failed:
            failures += 1
            body = f"<failure type={quoteattr(t.status)} message={quoteattr(why)}>{escape(why)}</failure>"
        body += f"<system-out>{escape(_junit_out(t))}</system-out>"
        cases.append(f'  <testcase classname="portability.{escape(t.platform)}" name={quoteattr(t.id)} '
                     f'time="{t.duration_s or 0:.3f}">{body}</testcase>')
    name = quoteattr(f"portability check {Path(report.model['path']).name}")
    props = {"model": report.model.get("path"), "model.sha256": report.model.get("sha256"),
             "reference": report.reference, "portability": report.tool.get("version"), "passed": str(report.passed).lower()}
    prop_xml = "".join(f"<property name={quoteattr(k)} value={quoteattr(str(v))}/>" for k, v in props.items() if v is not None)
    total = sum(t.duration_s or 0 for t in report.targets)
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name={name} tests="{len(report.targets)}" '
            f'failures="{failures}" skipped="{skipped}" errors="0" time="{total:.3f}" '
            f'timestamp={quoteattr(report.created_at)}>\n  <properties>{prop_xml}</properties>\n'
            + "\n".join(cases) + "\n</testsuite>\n")


def write_junit(report: Report, path: Path) -> None:
    write_atomic(path, to_junit(report))
