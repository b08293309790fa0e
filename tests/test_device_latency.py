"""Latency only where it is a device's: a target on a software GPU adapter or under emulation is converted,
run and compared as before, but not timed unless ``--time-emulated``; a missing latency is missing, never a
regression."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, by_id, check_json
from test_web import needs_browser


@needs_browser
def test_a_software_adapters_target_is_compared_but_not_timed_unless_asked(tmp_path):
    args = ("-t", "web/ort-webgpu,web/ort-wasm", "--gate", "web/ort-webgpu", "--max-abs", "10", "--cosine", "0",
            "--min-top1", "0")
    plain = by_id(check_json(tmp_path, FIXTURES / "lenet.onnx", *args, expect_rc=None))
    gpu, wasm = plain["web/ort-webgpu"], plain["web/ort-wasm"]
    assert gpu["device"] == "software" and gpu["metrics"]["latency_ms"] is None
    assert gpu["metrics"]["latency_skipped"] == "software adapter"
    assert any("not timed" in n and "--time-emulated" in n for n in gpu["notes"])
    assert wasm["metrics"]["latency_ms"]["p50"] > 0 and "latency_skipped" not in wasm["metrics"]
    timed = by_id(check_json(tmp_path, FIXTURES / "lenet.onnx", *args, "--time-emulated", expect_rc=None))
    again = timed["web/ort-webgpu"]
    assert again["metrics"]["latency_ms"]["runs"] >= 0 and "latency_skipped" not in again["metrics"]
    # correctness unchanged: the same status, drift and batches compared
    assert again["status"] == gpu["status"]
    assert again["metrics"]["outputs"] == gpu["metrics"]["outputs"]
    assert again["details"].get("samples") == gpu["details"].get("samples")


def test_a_latency_not_timed_is_no_regression():
    from portability.report.diff import diff
    from portability.report.schema import Report, TargetResult

    def report(metrics: dict) -> Report:
        t = TargetResult(id="mobile/arm64-tflite", platform="mobile", status="pass", gating=True, metrics=metrics)
        return Report(tool={}, created_at="", environment={}, model={"inputs": [], "outputs": []}, inputs={},
                      reference="server/ort-cpu", targets=(t,), passed=True)

    before = report({"latency_ms": {"p50": 3.0, "runs": 50}})
    after = report({"latency_ms": None, "latency_skipped": "emulated"})
    assert [c.kind for c in diff(before, after).changes if c.kind == "latency"] == []
    assert [c.kind for c in diff(after, before).changes if c.kind == "latency"] == []


def test_the_reference_implementation_is_compared_but_not_timed_unless_asked(tmp_path):
    """onnx.reference evaluates the spec in Python: its speed is no runtime's a user ships."""
    args = ("-t", "server/onnx-reference,server/ort-cpu-noopt")
    plain = by_id(check_json(tmp_path, FIXTURES / "lenet.onnx", *args))
    ref, noopt = plain["server/onnx-reference"], plain["server/ort-cpu-noopt"]
    assert ref["status"] == "pass" and ref["metrics"]["latency_ms"] is None
    assert ref["metrics"]["latency_skipped"] == "reference implementation"
    assert any("not timed" in n and "Python evaluator" in n for n in ref["notes"])
    assert noopt["metrics"]["latency_ms"]["p50"] > 0 and "latency_skipped" not in noopt["metrics"]
    timed = by_id(check_json(tmp_path, FIXTURES / "lenet.onnx", *args, "--time-emulated"))["server/onnx-reference"]
    assert timed["metrics"]["latency_ms"]["p50"] > 0 and "latency_skipped" not in timed["metrics"]
    assert timed["metrics"]["outputs"] == ref["metrics"]["outputs"]


def test_each_reason_not_to_time_has_a_mark_and_a_note():
    from portability.metrics.latency import UNTIMED, mark, timing_note
    from portability.runtimes.onnx_reference import OnnxReference

    assert OnnxReference.not_a_device in UNTIMED
    for why, (whose, short) in UNTIMED.items():
        assert mark(why) == short and timing_note({"latency_skipped": why})[0].startswith(f"not timed: its speed is {whose}'s")
