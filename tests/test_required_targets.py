"""Explicit means required: a target named by its exact id with ``--targets`` that could not run here
(``skipped``) fails the run, saying why and what fixes it, unless ``--allow-skipped``; a platform name asks only
for what can run here."""
from __future__ import annotations

import json

from conftest import FIXTURES, run_cli
from portability.core.status import Status
from portability.engine.verdict import named, require_named, unmet
from portability.report.schema import Report, TargetResult

#: a Chromium that is not there: the web targets are skipped, whatever this machine has
NO_BROWSER = {"PORTABILITY_CHROMIUM": "/nonexistent/chromium"}
FAST = ("--runs", "0", "--samples", "2", "--no-history")


def _check(tmp_path, targets: str, *args: str):
    out = tmp_path / "r.json"
    p = run_cli("check", str(FIXTURES / "mlp.onnx"), "-t", targets, "--json", str(out), *FAST, *args, env=NO_BROWSER)
    return p, json.loads(out.read_text())


def test_a_named_target_that_is_skipped_fails_the_run_with_why_and_the_fix(tmp_path):
    p, r = _check(tmp_path, "server/ort-cpu-noopt,web/ort-wasm")
    assert p.returncode == 1, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("failed:") and "web/ort-wasm skipped (Chromium not found" in last, p.stderr
    assert "fix: apt-get install -y chromium, then: portability setup web" in last and "--allow-skipped" in last
    assert r["passed"] is False and any("web/ort-wasm" in n and "--allow-skipped" in n for n in r["notes"])


def test_allow_skipped_lets_it_pass(tmp_path):
    p, r = _check(tmp_path, "server/ort-cpu-noopt,web/ort-wasm", "--allow-skipped")
    assert p.returncode == 0, p.stderr
    assert r["passed"] is True and {t["id"]: t["status"] for t in r["targets"]}["web/ort-wasm"] == "skipped"


def test_a_platform_name_asks_only_for_what_can_run(tmp_path):
    p, r = _check(tmp_path, "server/ort-cpu-noopt,web")
    assert p.returncode == 0, p.stderr
    assert all(t["status"] == "skipped" for t in r["targets"] if t["platform"] == "web") and r["passed"] is True


def _result(tid: str, status: str, artifact: dict | None = None) -> TargetResult:
    return TargetResult(id=tid, platform=tid.split("/")[0], status=Status(status), gating=True, artifact=artifact)


def _Report(*targets: TargetResult) -> Report:
    return Report(tool={}, created_at="", environment={}, model={}, inputs={}, reference=targets[0].id,
                  targets=targets, passed=True)


def test_named_ids_and_the_convert_only_exception():
    assert named("server, web/ort-wasm,mobile/tflite-fp32,all") == ["web/ort-wasm", "mobile/tflite-fp32"]
    rep = _Report(_result("server/ort-cpu", "pass"), _result("web/ort-wasm", "skipped"),
                  _result("mobile/coreml", "skipped", {"format": "coreml"}), _result("mobile/tflite-fp32", "skipped"))
    # Core ML predicts only on Apple platforms: its skip after a conversion is all it can do here
    assert [t.id for t in unmet(rep, "web/ort-wasm,mobile/coreml")] == ["web/ort-wasm"]
    assert [t.id for t in unmet(rep, "web,mobile")] == []
    assert require_named(rep, "mobile/tflite-fp32", allow_skipped=True) is rep
    failed = require_named(rep, "mobile/tflite-fp32")
    assert failed.passed is False and "mobile/tflite-fp32" in failed.notes[-1]
