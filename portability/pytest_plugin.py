"""A pytest plugin: "this model stays portable to web and mobile" in one line.

    # test_model.py  (the plugin loads itself once portability is installed; else, in conftest.py:
    # pytest_plugins = ["portability.pytest_plugin"])
    from portability.pytest_plugin import assert_portable

    def test_ships_everywhere():
        assert_portable("model.onnx", targets=["web", "mobile"], dataset="digits.npz")

    def test_with_the_fixture(portability_check):
        report = portability_check("model.onnx", targets="server")  # fails the test like assert_portable
        assert report.target("server/ort-cpu-noopt").metrics["top1_agreement"] == 1.0

A failure names every offending target with what failed (the breached thresholds, or the error and the
op), and, with ``baseline=``, every regression since that report. Nothing heavy is imported until a check
runs: loading the plugin costs nothing.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from portability.core.status import Status


class NotPortable(AssertionError):
    """A gating target failed, or regressed since the baseline. ``report`` (and ``diff``) say everything."""

    def __init__(self, message: str, report, diff=None):
        super().__init__(message)
        self.report, self.diff = report, diff


def failure_message(report, diff=None) -> str | None:
    """None when the check passed (and nothing regressed); else a readable, multi-line reason."""
    failing = [t for t in report.targets if t.gating and t.failed]
    regressions = list(diff.gating_regressions) if diff is not None else []
    if not failing and not regressions:
        return None
    name = Path(str(report.model.get("path", "model"))).name
    lines = [f"{name} is not portable: {len(failing)} of {len(report.targets)} targets failed"
             + (f", {len(regressions)} regression(s) since {diff.before}" if regressions else "")]
    for t in failing:
        why = list(t.breaches) or [t.error or t.status]
        if t.op:
            why.append(f"op {t.op}" + (f" (node {t.node})" if t.node else ""))
        lines.append(f"  {t.id}: {t.status} — " + "; ".join(why))
    lines += [f"  {c.target}: regressed — {c.text}" for c in regressions]
    lines.append(f"  (reference {report.reference}; passed: "
                 + (", ".join(t.id for t in report.targets if t.status == Status.PASS) or "none") + ")")
    return "\n".join(lines)


def assert_portable(model, targets="server", dataset=None, *, baseline=None, **options):
    """Check ``model`` on ``targets`` and fail (NotPortable, an AssertionError) unless every gating target
    passed and, with ``baseline`` (a JSON report path or a history run id), nothing regressed since.
    Options are those of ``portability.check``. Returns the Report."""
    __tracebackhide__ = True
    from portability.api import check

    base = None
    if baseline is not None:
        from portability.report import baseline as bl

        base = bl.load(str(baseline))
    report = check(model, targets, dataset, **options)
    d = None
    if base is not None:
        from portability.report.diff import diff

        d = diff(base[0], report, labels=(base[1], "this check"))
    msg = failure_message(report, d)
    if msg:
        raise NotPortable(msg, report, d)
    return report


@pytest.fixture
def portability_check(request):
    """``portability_check(model, targets=..., **options)``: assert_portable, with the verdict and each
    target's status added to the test's ``user_properties`` (in JUnit XML with ``junit_family=xunit1``)."""
    record_property = lambda name, value: request.node.user_properties.append((name, value))  # noqa: E731

    def run(model, targets="server", dataset=None, **options):
        __tracebackhide__ = True
        try:
            report = assert_portable(model, targets, dataset, **options)
        except NotPortable as e:
            _record(record_property, e.report)
            raise
        _record(record_property, report)
        return report

    return run


def _record(record_property, report) -> None:
    record_property("portability.passed", str(report.passed).lower())
    for t in report.targets:
        record_property(f"portability.{t.id}", t.status)
