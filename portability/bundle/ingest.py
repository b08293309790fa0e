"""``portability ingest RESULT``: a bundle's ``result.json`` (``bundle/web.py``, ``bundle/mobile.py``) back into a report.

The file is checked before anything is written: bounded, typed JSON of the result format (``result_file``),
the model's sha256 and the inputs' digest of the report it joins, targets that report ran, metrics that
are numbers in range, a p50 that is the median of its samples, and a status that follows from the metrics
and the report's own thresholds for that target (a pass over a breached bound is refused, as is a drift
within every bound). The status recorded is the check's own verdict: a target whose engine says it ran on
another backend than the one asked for is a ``fallback`` (``engine.verdict.reported_breach`` over the engine's
``info`` and what its runtime ``accepts``), whatever the page called it. Each target becomes
``web/<target>@<device>`` (``mobile/...`` for a mobile bundle's) in a copy of the report.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from portability.bundle.result_file import DEVICES, Refused, load
from portability.core.errors import UsageError
from portability.core.status import COMPARED, Status
from portability.report.schema import Report, TargetResult

#: the statuses a page can end a target in
PAGE_STATUSES = (*COMPARED, Status.FALLBACK, Status.LOAD_ERROR, Status.RUN_ERROR)
#: the statuses of a target that ran to outputs on the device (compared, whatever backend it ran on)
RAN = (*COMPARED, Status.FALLBACK)
#: the characters of an error status's message kept in the report
MAX_STORED_ERROR = 2000


def read(path: Path) -> dict:
    """The result file's fields, checked for size, depth, numbers, types and caps (``result_file``); Refused
    when truncated, not JSON, hostile or not a result."""
    return load(Path(path))


def base_report(doc: dict, spec: str | None) -> tuple[Report, str]:
    """The report the result joins: ``spec`` (a history run id or a JSON report), else the last run of the
    history of that model that holds every target of the result."""
    sha = doc["model"]["sha256"]
    if spec is not None:
        from portability.report import baseline

        report, label = baseline.load(spec)
        if report.model.get("sha256") != sha:
            raise Refused(f"the result is of model {sha[:12]}, {label} of model {str(report.model.get('sha256'))[:12]}: "
                          "not the same model")
        return report, label
    from portability.report.history import History, HistoryError, default_path

    if default_path().is_file():
        try:
            with History() as h:
                for r in h.runs(model_sha256=sha, limit=200):
                    report = h.report(r.id)
                    if report.model.get("sha256") == sha and all(report.target(t["id"]) for t in doc["targets"]):
                        return report, f"run {r.id}"
        except HistoryError as e:
            raise UsageError(str(e)) from None
    raise Refused(f"no check of model {sha[:12]} with these targets in the history: give its report with --report")


def _number(v: Any, what: str, lo: float = -math.inf, hi: float = math.inf, inf_ok: bool = False) -> float:
    """A number in [lo, hi]; with ``inf_ok``, the string "inf" too (a NaN/Inf mismatch's max_abs)."""
    if inf_ok and v == "inf":
        v = math.inf
    if type(v) not in (int, float) or math.isnan(v) or not lo <= v <= hi:
        raise Refused(f"{what} is {v!r}: not a number in [{lo}, {hi}] (a forged or damaged result)")
    return float(v)


def _count(v: Any, what: str, lo: int, hi: int = 2 ** 53) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise Refused(f"{what} is {v!r}: not an integer in [{lo}, {hi}] (a forged or damaged result)")
    return v


def _ref_scale(report: Report, name: str) -> float | None:
    """The reference's largest magnitude of one output, from the report's output digests."""
    stats = (((report.output_digests or {}).get("targets") or {}).get(report.reference) or {}).get(name, {}).get("stats")
    if not stats or stats.get("min") is None:
        return None
    return max(abs(stats["min"]), abs(stats["max"]))


def _outputs(t: dict, report: Report, where: str) -> dict[str, dict]:
    """A compared target's per-output drift, checked: numbers in range, the reference's scale as the report has it."""
    from portability.metrics.bounds import CHECK, judge_output

    outs = t.get("outputs")
    if not isinstance(outs, dict):
        raise Refused(f"{where}: no outputs")
    names = [o["name"] for o in report.model.get("outputs") or []]
    extra = sorted(set(outs) - set(names))
    if extra:
        raise Refused(f"{where}: output {extra[0]!r} is not an output of the model ({', '.join(names)})")
    stats, breaches = {}, []
    base = report.target(t["id"])
    for name, m in outs.items():
        if not isinstance(m, dict):
            raise Refused(f"{where}: output {name!r} has no metrics")
        s = {"max_abs": _number(m.get("max_abs"), f"{where} {name} max_abs", 0.0, inf_ok=True),
             "cosine": _number(m.get("cosine"), f"{where} {name} cosine", -1.0, 1.0),
             "ref_max_abs": _number(m.get("ref_max_abs"), f"{where} {name} ref_max_abs", 0.0)}
        size = _count(m.get("size"), f"{where} {name} size", 1)
        scale = _ref_scale(report, name)
        if scale is not None and not math.isclose(scale, s["ref_max_abs"], rel_tol=1e-5, abs_tol=1e-12):
            raise Refused(f"{where}: output {name!r} was compared with a reference of scale {s['ref_max_abs']:g}, "
                          f"the report's reference has {scale:g}")
        if m.get("nonfinite_mismatch"):
            s["nonfinite_mismatch"] = _count(m["nonfinite_mismatch"], f"{where} {name} nonfinite_mismatch", 1, size)
        stats[name] = s
        breaches += [b.text for b in judge_output(name, s, base.thresholds, CHECK, size)]
    breaches += [f"output '{n}' is missing" for n in names if n not in stats]
    return {"outputs": stats, "breaches": breaches}


def _latency(t: dict, where: str) -> dict:
    lat = t.get("latency_ms")
    if not isinstance(lat, dict) or not isinstance(lat.get("samples"), list) or not lat["samples"]:
        raise Refused(f"{where}: no latency samples")
    samples_in_order = [_number(x, f"{where} latency sample", 0.0, 3.6e6) for x in lat["samples"]]
    samples = sorted(samples_in_order)
    n = len(samples)
    median = samples[n // 2] if n % 2 else (samples[n // 2 - 1] + samples[n // 2]) / 2
    p50 = _number(lat.get("p50"), f"{where} p50", 0.0)
    if not math.isclose(p50, median, rel_tol=1e-6, abs_tol=1e-9):
        raise Refused(f"{where}: p50 {p50:g} ms is not the median of its samples ({median:g} ms)")
    return {"p50": p50, "samples": samples_in_order}


def accepts(target_id: str) -> dict:
    """What the target's runtime says its engine's account of a run holds when the backend asked for ran
    (``Runtime.accepts``, for the target's options; empty for a target this portability does not know)."""
    from portability.core.target import load_class
    from portability.targets import registry

    t = registry().get(target_id)
    try:
        return load_class(t.runtime).accepts(dict(t.options)) if t else {}
    except (ImportError, AttributeError):
        return {}


def check_target(t: dict, report: Report) -> tuple[Status, dict, list[str]]:
    """(status, metrics, breaches) of one result target, or Refused when it is inconsistent. The status is the
    verdict's: ``fallback`` where the engine ran on another backend than the one asked for, else what the
    metrics make it (a page that called a fallback ``pass``, as pages did before they judged backends, is
    corrected; a ``fallback`` that its engine's account does not bear out is refused)."""
    from portability.engine.verdict import reported_breach

    where = f"target {t['id']}"
    if report.target(t["id"]) is None:
        raise Refused(f"{where} is not in the report it joins")
    if t.get("status") not in PAGE_STATUSES:
        raise Refused(f"{where}: status {t.get('status')!r} is not one of {', '.join(PAGE_STATUSES)}")
    status = Status(t["status"])
    if status not in RAN:
        if not isinstance(t.get("error"), str) or not t["error"].strip() or t.get("outputs"):
            raise Refused(f"{where}: an error status needs its error text and no outputs")
        return status, {}, []
    judged = _outputs(t, report, where)
    expected = Status.DRIFT if judged["breaches"] else Status.PASS
    off = reported_breach(accepts(t["id"]), t.get("info") if isinstance(t.get("info"), dict) else {})
    if status == Status.FALLBACK and not off:
        raise Refused(f"{where} says fallback but its engine ran on the backend asked for: a forged or inconsistent result")
    if status != Status.FALLBACK and status != expected:
        why = "; ".join(judged["breaches"]) or "every output is within the thresholds"
        raise Refused(f"{where} says {status} but its metrics make it {expected} ({why}): a forged or inconsistent result")
    metrics = {"outputs": judged["outputs"], "latency_ms": _latency(t, where)}
    return (Status.FALLBACK, metrics, [off, *judged["breaches"]]) if off else (status, metrics, judged["breaches"])


def device_slug(device: dict) -> str:
    """A short name of the device: its WebGPU adapter (vendor, architecture), else browser and platform; for
    a mobile bundle's, its machine and board or CPU."""
    gpu = device.get("gpu") if isinstance(device.get("gpu"), dict) else None
    if "user_agent" not in device:
        text = f"{device['machine']} {device.get('board') or device.get('cpu') or ''}"
    elif gpu and not gpu.get("fallback") and (gpu.get("vendor") or gpu.get("architecture")):
        text = f"{gpu.get('vendor', '')} {gpu.get('architecture', '')}"
    else:
        ua = device["user_agent"]
        m = re.search(r"(HeadlessChrome|Edg|OPR|Chrome|Firefox|Version)/(\d+)", ua)
        browser = ("safari" if m.group(1) == "Version" else m.group(1)) + "-" + m.group(2) if m else "browser"
        text = f"{browser} {device.get('platform') or ''}"
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "device"


def merge(report: Report, doc: dict, source: str) -> tuple[Report, list[TargetResult]]:
    """A copy of ``report`` with the result's targets added (replacing an earlier ingest of the same id)."""
    if doc.get("reference") != report.reference:
        raise Refused(f"the result was compared with {doc.get('reference')!r}, the report's reference is {report.reference}")
    inputs = ((report.output_digests or {}).get("inputs") or {}).get("digest")
    if inputs and doc.get("inputs") != inputs:
        raise Refused("the result ran other inputs than the report's (their digests differ)")
    slug = device_slug(doc["device"])
    platform = DEVICES[doc["kind"]][0]
    where = f"in a browser on {slug}" if platform == "web" else f"on {slug}"
    software = bool(doc["device"].get("software"))
    added = []
    for t in doc["targets"]:
        status, metrics, breaches = check_target(t, report)
        base = report.target(t["id"])
        device = ("software" if software else "gpu") if base.device in ("gpu", "software") else base.device
        info = t.get("info") if isinstance(t.get("info"), dict) else {}
        added.append(TargetResult(
            id=f"{t['id']}@{slug}", platform=platform, status=status, gating=base.gating, runtime=base.runtime, device=device,
            error=str(t["error"])[:MAX_STORED_ERROR] if status not in RAN else None, metrics=metrics, thresholds=dict(base.thresholds),
            breaches=tuple(breaches), notes=(f"run {where}, brought back from {Path(source).name}",),
            details={"device": doc["device"], "engine": {k: v for k, v in info.items() if k not in ("inputs", "outputs")},
                     "ingested": {"file": str(source), "bundle": doc.get("bundle"), "ran_at": doc.get("created_at")}}))
    ids = {t.id for t in added}
    targets = tuple(t for t in report.targets if t.id not in ids) + tuple(added)
    passed = all(not t.failed for t in targets if t.gating)
    return replace(report, targets=targets, passed=passed), added
