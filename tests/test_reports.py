"""Reports people and CI read: one check writing JSON, HTML, Markdown and JUnit; the history database;
diff and the --baseline regression gate. Server targets only, a few timed runs: seconds each."""
from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, ROOT, by_id, run_cli

SCHEMAS = ROOT / "tests" / "schemas"
FAST = ("--runs", "3", "--warmup", "1")
TEST_TARGETS = {"PORTABILITY_PLUGINS": "doubles"}


@pytest.fixture(autouse=True)
def _history_per_test(tmp_path, monkeypatch):
    """These tests count rows: each gets a history database of its own."""
    monkeypatch.setenv("PORTABILITY_DATA_DIR", str(tmp_path / "data"))


def perturbed_lenet(dst: Path, scale: float = 0.5) -> Path:
    """fixtures/lenet.onnx with seeded noise on every weight matrix: a retrained-and-worse version of the
    same model (same inputs and outputs, lower accuracy on the digits)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(FIXTURES / "lenet.onnx"))
    rng = np.random.default_rng(0)
    for init in m.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype == np.float32 and a.ndim >= 2:
            init.CopyFrom(numpy_helper.from_array(a + rng.normal(0, scale * a.std(), a.shape).astype(a.dtype), init.name))
    onnx.save(m, str(dst))
    return dst


def _validate_junit(path: Path) -> None:
    import xmlschema

    for xsd in ("jenkins-junit.xsd", "junit-10.xsd"):
        xmlschema.XMLSchema(str(SCHEMAS / xsd)).validate(str(path))  # raises with the offending element


def test_one_check_writes_every_report(tmp_path):
    out = {k: tmp_path / f"r.{k}" for k in ("json", "html", "md", "xml")}
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--dataset", str(FIXTURES / "digits.npz"), "-t",
                "server/ort-cpu-noopt,test/noisy,server/ort-cuda", "--gate", "-test/noisy", "--allow-skipped", *FAST,
                "--json", str(out["json"]), "--html", str(out["html"]), "--markdown", str(out["md"]),
                "--junit", str(out["xml"]), env=TEST_TARGETS)
    assert p.returncode == 0, p.stderr
    report = json.loads(out["json"].read_text())
    t = by_id(report)
    assert t["test/noisy"]["status"] == "drift" and t["server/ort-cpu-noopt"]["status"] == "pass"
    # the per-run timings the latency plot draws are in the report, consistent with its percentiles
    lat = t["server/ort-cpu-noopt"]["metrics"]["latency_ms"]
    assert len(lat["samples"]) == lat["runs"] == 3 and min(lat["samples"]) == pytest.approx(lat["min"], abs=1e-3)

    html = out["html"].read_text()
    assert html.count("<svg") == 4  # drift, latency, size, accuracy
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "the HTML must not fetch anything"
    assert "<script" not in html
    assert "test/noisy" in html and "OnnxFromOnnx" in html  # a target's drift; the chain of conversions

    md = out["md"].read_text()
    lines = md.splitlines()
    assert lines[0].startswith("## portability: ✅ **passed**")
    failing = next(i for i, x in enumerate(lines) if x.startswith("### Failing targets"))
    table = next(i for i, x in enumerate(lines) if x.startswith("| target |"))
    assert failing < table, "failing targets come before the table"
    noisy = next(x for x in lines[failing:table] if "test/noisy" in x)
    assert "max_abs" in noisy and "cross-check" in noisy
    assert sum(x.startswith("| `") for x in lines) == len(report["targets"])

    _validate_junit(out["xml"])
    xml = out["xml"].read_text()
    assert 'tests="4"' in xml and 'skipped="2"' in xml and 'failures="0"' in xml  # cuda skipped, noisy a cross-check


def test_junit_failure_is_valid_and_names_the_breach(tmp_path):
    xml = tmp_path / "j.xml"
    p = run_cli("check", str(FIXTURES / "mlp.onnx"), "-t", "test/noisy", *FAST, "--junit", str(xml), "--no-history",
                env=TEST_TARGETS)
    assert p.returncode == 1, p.stderr
    _validate_junit(xml)
    text = xml.read_text()
    assert 'failures="1"' in text and '<failure type="drift"' in text and "max_abs" in text


def test_html_and_markdown_need_writable_folders(tmp_path):
    p = run_cli("check", str(FIXTURES / "mlp.onnx"), "--html", str(tmp_path / "no" / "r.html"))
    assert p.returncode == 2 and "cannot write a report" in p.stderr and "Traceback" not in p.stderr


# -- history ---------------------------------------------------------------------------------------
def test_history_lists_checks_and_opt_out(tmp_path):
    model = FIXTURES / "mlp.onnx"
    for extra in ((), ("--no-history",), ()):
        assert run_cli("check", str(model), "-t", "server/ort-cpu", *FAST, *extra).returncode == 0
    run_cli("check", str(FIXTURES / "lenet.onnx"), "-t", "server/ort-cpu", *FAST)
    rows = json.loads(run_cli("history", "--json").stdout)
    assert [r["model_path"].endswith(n) for r, n in zip(rows, ("lenet.onnx", "mlp.onnx", "mlp.onnx"))] == [True] * 3
    assert len(rows) == 3  # the --no-history check left no row
    assert [r["id"] for r in rows] == sorted((r["id"] for r in rows), reverse=True)
    mine = json.loads(run_cli("history", str(model), "--json").stdout)
    assert len(mine) == 2 and all(r["passed"] and r["counts"] == {"pass": 1} for r in mine)
    p = run_cli("history", str(model))
    assert p.returncode == 0 and "mlp.onnx" in p.stdout and "lenet" not in p.stdout


_RECORDER = """
import json, sys, time
from portability.report.history import History
from portability.report.schema import Report
report = Report.from_dict(json.load(open(sys.argv[1])))
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
with History() as h:
    for _ in range(int(sys.argv[3])):
        h.record(report)
"""


def test_concurrent_writers_lose_no_row(tmp_path):
    """Eight processes released at the same instant, each recording 25 reports as fast as it can."""
    import time

    src = tmp_path / "r.json"
    assert run_cli("check", str(FIXTURES / "mlp.onnx"), "-t", "server/ort-cpu", *FAST, "--json", str(src),
                   "--no-history").returncode == 0
    start = time.time() + 3
    procs = [subprocess.Popen([sys.executable, "-c", _RECORDER, str(src), str(start), "25"], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    errs = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert all(rc == 0 for rc, _ in errs), errs
    db = sqlite3.connect(tmp_path / "data" / "history.sqlite")
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 200
    assert db.execute("SELECT COUNT(*) FROM target_results").fetchone()[0] == 200
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.slow
def test_eight_concurrent_checks_all_recorded(tmp_path):
    env = dict(__import__("os").environ, PORTABILITY_DATA_DIR=str(tmp_path / "data"))
    procs = [subprocess.Popen([sys.executable, "-m", "portability", "check", str(FIXTURES / "mlp.onnx"), "-t",
                               "server/ort-cpu", "--runs", "2", "--warmup", "0", "-q"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(rc == 0 and "history: run" in err for rc, err in results), results
    ids = sorted(int(re.search(r"history: run (\d+)", err).group(1)) for _, err in results)
    assert ids == list(range(1, 9))
    assert len(json.loads(run_cli("history", "--json", env={"PORTABILITY_DATA_DIR": str(tmp_path / "data")}).stdout)) == 8


def test_old_database_is_migrated_and_newer_refused(tmp_path):
    from portability.report.history import MIGRATIONS, SCHEMA_VERSION, History, HistoryError

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + "PRAGMA user_version = 1;")
    db.execute("INSERT INTO runs (created_at, model_sha256, model_path, passed, report) VALUES ('t', 'abc', 'm', 1, '{}')")
    db.commit()
    db.close()
    with History(path) as h:
        assert h.version() == SCHEMA_VERSION > 1
        assert h.count() == 1 and h.runs()[0].model_sha256 == "abc"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(HistoryError, match="newer"):
        History(path)


# -- diff and --baseline ---------------------------------------------------------------------------
def test_regressed_model_fails_the_baseline_and_an_identical_rerun_passes(tmp_path):
    """A perturbed copy of the LeNet (same signature, worse weights) checked against the original's
    report: diff names every target whose accuracy fell; --baseline exits 1; the original rerun exits 0."""
    base = tmp_path / "base.json"
    common = ("--dataset", str(FIXTURES / "digits.npz"), "-t", "server/ort-cpu-noopt", *FAST)
    assert run_cli("check", str(FIXTURES / "lenet.onnx"), *common, "--json", str(base)).returncode == 0
    worse = perturbed_lenet(tmp_path / "lenet_v2.onnx")
    new = tmp_path / "new.json"
    p = run_cli("check", str(worse), *common, "--baseline", str(base), "--json", str(new), "--markdown", str(tmp_path / "s.md"))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "server/ort-cpu-noopt regressed (accuracy)" in p.stderr
    acc_new = by_id(json.loads(new.read_text()))["server/ort-cpu"]["metrics"]["accuracy"]
    acc_old = by_id(json.loads(base.read_text()))["server/ort-cpu"]["metrics"]["accuracy"]
    assert acc_new < acc_old - 0.005

    d = run_cli("diff", str(base), str(new), "--json")
    changes = json.loads(d.stdout)["changes"]
    acc = {(c["target"], c["metric"]) for c in changes if c["kind"] == "accuracy" and c["regression"]}
    assert acc == {("server/ort-cpu", "accuracy"), ("server/ort-cpu-noopt", "accuracy")}
    assert any("different model files" in n for n in json.loads(d.stdout)["notes"])
    assert "regressed since the baseline" in (tmp_path / "s.md").read_text().lower()

    same = run_cli("check", str(FIXTURES / "lenet.onnx"), *common, "--baseline", str(base))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "nothing regressed" in same.stderr


def test_status_regression_comes_first_and_history_ids_work(tmp_path):
    """The same model and target judged with loose, then default thresholds: pass -> drift."""
    model = str(FIXTURES / "mlp.onnx")
    loose = run_cli("check", model, "-t", "test/noisy", *FAST, "--max-abs", "10", "--cosine", "0", "--min-top1", "0",
                    env=TEST_TARGETS)
    assert loose.returncode == 0, loose.stderr
    run_id = re.search(r"history: run (\d+)", loose.stderr).group(1)
    strict = run_cli("check", model, "-t", "test/noisy", *FAST, "--baseline", run_id, "--gate", "-test/noisy",
                     env=TEST_TARGETS)
    # a cross-check's regression is reported, never gating
    assert strict.returncode == 0 and "test/noisy status pass → drift" in strict.stdout
    gated = run_cli("check", model, "-t", "test/noisy", *FAST, "--baseline", run_id, env=TEST_TARGETS)
    assert gated.returncode == 1
    d = run_cli("diff", run_id, str(int(run_id) + 2))
    lines = [x for x in d.stdout.splitlines() if x.startswith("  ")]
    assert "status pass → drift" in lines[0] and "test/noisy" in lines[0]


@pytest.mark.parametrize("spec, why", [("missing.json", "neither a run id"), ("999", "no run 999"),
                                       ("BADJSON", "not a portability JSON report"), ("OTHER", "other inputs/outputs")])
def test_bad_baseline_is_a_usage_error(tmp_path, spec, why):
    if spec == "BADJSON":
        spec = str(tmp_path / "bad.json")
        Path(spec).write_text("{not json")
    if spec == "OTHER":
        spec = str(tmp_path / "other.json")
        assert run_cli("check", str(FIXTURES / "two_outputs.onnx"), "-t", "server/ort-cpu", *FAST, "--json", spec).returncode == 0
    p = run_cli("check", str(FIXTURES / "mlp.onnx"), "-t", "server/ort-cpu", *FAST, "--baseline", spec)
    assert p.returncode == 2, p.stderr
    assert why in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_profiles_input_specs_and_thresholds_from_config(tmp_path):
    import shutil

    (tmp_path / "data").mkdir()
    shutil.copy(FIXTURES / "digits.npz", tmp_path / "data" / "d.npz")
    (tmp_path / "portability.toml").write_text(
        'targets = "server/ort-cpu"\nruns = 2\n[regression]\nsize_growth = 0.5\n'
        '[profiles.ci]\ntargets = "server/ort-cpu-noopt"\ndataset = "data/d.npz"\nsamples = 50\n'
        '[thresholds]\nmax_abs = 1e-3\n')
    cfg = ("--config", str(tmp_path / "portability.toml"))
    plain = run_cli("check", str(FIXTURES / "mlp.onnx"), *cfg, "--json", str(tmp_path / "a.json"))
    ci = run_cli("check", str(FIXTURES / "mlp.onnx"), *cfg, "--profile", "ci", "--json", str(tmp_path / "b.json"))
    assert plain.returncode == 0 and ci.returncode == 0, plain.stderr + ci.stderr
    assert set(by_id(json.loads((tmp_path / "a.json").read_text()))) == {"server/ort-cpu"}
    b = by_id(json.loads((tmp_path / "b.json").read_text()))
    assert set(b) == {"server/ort-cpu", "server/ort-cpu-noopt"} and b["server/ort-cpu-noopt"]["metrics"]["latency_ms"]["runs"] == 2
    assert b["server/ort-cpu-noopt"]["thresholds"]["max_abs"] == 1e-3
    inputs = json.loads((tmp_path / "b.json").read_text())["inputs"]
    assert inputs["source"] == "dataset" and inputs["samples"] == 40  # the profile's dataset (relative to the file), less
    # its last 10, held out to calibrate
    bad = run_cli("check", str(FIXTURES / "mlp.onnx"), *cfg, "--profile", "nightly")
    assert bad.returncode == 2 and "no profile 'nightly' (profiles: ci)" in bad.stderr


def test_latency_and_size_only_beyond_their_bounds():
    """Latency is reported but gates only when asked; size growth gates beyond its bound; noise is silent."""
    from portability.report.diff import Tolerances, diff
    from portability.report.schema import Report, TargetResult

    def report(p50: float, size: int, max_abs: float) -> Report:
        t = TargetResult(id="web/ort-wasm", platform="web", status="pass", gating=True, artifact={"format": "onnx", "size_bytes": size},
                         metrics={"outputs": {"y": {"max_abs": max_abs, "cosine": 1.0}}, "latency_ms": {"p50": p50}},
                         thresholds={"max_abs": 1e-4})
        return Report(tool={}, created_at="", environment={}, model={"inputs": [], "outputs": []}, inputs={},
                      reference="server/ort-cpu", targets=(t,), passed=True)

    base = report(1.0, 1000, 1e-6)
    assert diff(base, report(1.2, 1050, 5e-6)).changes == ()  # within noise: +20 % latency, +5 % size, drift < 1e-5
    slow = diff(base, report(3.0, 1000, 1e-6))
    assert [(c.kind, c.regression) for c in slow.changes] == [("latency", False)]
    assert [c.kind for c in diff(base, report(3.0, 1000, 1e-6), Tolerances(gate_latency=True)).gating_regressions] == ["latency"]
    grown = diff(base, report(1.0, 1500, 1e-6))
    assert [(c.kind, c.regression) for c in grown.changes] == [("size", True)]
    assert diff(base, report(1.0, 1500, 1e-6), Tolerances(size_growth=0.6)).changes == ()
    drifted = diff(base, report(1.0, 1000, 5e-5))
    assert [(c.metric, c.regression) for c in drifted.changes] == [("max_abs[y]", True)]


def test_reports_and_diff_ask_every_registered_metric(monkeypatch):
    """A metric owns its regression rule, its tolerance, its columns, its sections and its plots: diff,
    --baseline and the renderers iterate the registry."""
    import types

    import portability.metrics as metrics
    from portability.metrics.base import Column, Moved, Plot, Section
    from portability.report import html, markdown
    from portability.report.diff import diff
    from portability.report.schema import Report, TargetResult

    def moved(a, b, tol):
        x, y = a.metrics.get("energy_mj"), b.metrics.get("energy_mj")
        return [Moved("latency", "energy_mj", x, y, y > x * 1.5, f"energy {x} → {y} mJ")] if x and y and x != y else []

    extra = types.SimpleNamespace(FIELDS={"energy_mj": None}, THRESHOLDS={}, TOLERANCES={}, regressions=moved,
                                  compute=lambda ev: ({}, []), breaches=lambda m, t: [],
                                  COLUMNS=(Column("energy mJ", lambda t, medium: f"{t.metrics['energy_mj']:.1f}"),),
                                  SECTIONS=(Section("Energy", lambda r, page: page.table(["target"], [["every one"]])),),
                                  PLOTS=(Plot("Energy per target", lambda r, kit: "<svg>energy bars</svg>", order=15),))
    monkeypatch.setattr(metrics, "METRICS", metrics.METRICS + (extra,))

    def report(mj: float) -> Report:
        t = TargetResult(id="web/ort-wasm", platform="web", status="pass", gating=True, metrics={"energy_mj": mj})
        return Report(tool={}, created_at="", environment={}, model={"inputs": [], "outputs": []}, inputs={},
                      reference="server/ort-cpu", targets=(t,), passed=True)

    d = diff(report(2.0), report(4.0))
    assert [(c.metric, c.regression, c.text) for c in d.changes] == [("energy_mj", True, "energy 2.0 → 4.0 mJ")]
    assert diff(report(2.0), report(2.0)).changes == ()
    md, page = markdown.render(report(4.0)), html.render(report(4.0))
    assert "| energy mJ |" in md and "| 4.0 |" in md
    assert "<th>energy mJ</th>" in page and "<h2>Energy</h2>" in page and "every one" in page
    assert "<figcaption>Energy per target</figcaption><svg>energy bars</svg>" in page



def test_diff_orders_the_kinds_the_metrics_declare(monkeypatch):
    """Each metric declares the kinds of change it reports; diff lists its own kinds (status, presence,
    outputs) and then the metrics' in registry order, so a metric registered with a kind of its own shows
    up in ``diff`` (in its registry place) without diff knowing of it."""
    import types

    import portability.metrics as metrics
    from portability.metrics import size
    from portability.metrics.base import Moved
    from portability.report.diff import diff, kind_order
    from portability.report.schema import Report, TargetResult

    assert kind_order() == ("status", "presence", "outputs", "drift", "accuracy", "size", "latency", "generation")
    for m in metrics.METRICS:
        if hasattr(m, "regressions"):
            assert m.REGRESSION_KINDS and all(isinstance(k, str) for k in m.REGRESSION_KINDS), m.__name__

    def moved(a, b, tol):
        x, y = a.metrics.get("energy_mj"), b.metrics.get("energy_mj")
        return [Moved("energy", "energy_mj", x, y, y > x * 1.5, f"energy {x} → {y} mJ")] if x != y else []

    extra = types.SimpleNamespace(FIELDS={"energy_mj": None}, THRESHOLDS={}, TOLERANCES={}, REGRESSION_KINDS=("energy",),
                                  regressions=moved, compute=lambda ev: ({}, []), breaches=lambda m, t: [])

    def report(status: str, size_bytes: int, mj: float) -> Report:
        t = TargetResult(id="web/ort-wasm", platform="web", status=status, gating=True, metrics={"energy_mj": mj},
                         artifact={"format": "onnx", "size_bytes": size_bytes})
        return Report(tool={}, created_at="", environment={}, model={"inputs": [], "outputs": []}, inputs={},
                      reference="server/ort-cpu", targets=(t,), passed=status == "pass")

    before, after = report("pass", 1000, 2.0), report("drift", 2000, 4.0)
    monkeypatch.setattr(metrics, "METRICS", metrics.METRICS + (extra,))
    assert kind_order()[-2:] == ("generation", "energy")
    assert [c.kind for c in diff(before, after).changes] == ["status", "size", "energy"]
    at = metrics.METRICS.index(size)
    monkeypatch.setattr(metrics, "METRICS", metrics.METRICS[:at] + (extra,) + metrics.METRICS[at:-1])
    d = diff(before, after)
    assert [c.kind for c in d.changes] == ["status", "energy", "size"]
    assert [(c.metric, c.regression, c.text) for c in d.changes][1] == ("energy_mj", True, "energy 2.0 → 4.0 mJ")

def test_snr_is_the_references_energy_over_the_differences_in_db():
    import numpy as np

    from portability.metrics.drift import output_drift

    r = np.linspace(-1.0, 1.0, 101)
    assert output_drift(r, r)["snr_db"] == float("inf")
    assert output_drift(r, 0.9 * r)["snr_db"] == 20.0  # a difference of a tenth of the signal: 20 dB
    assert output_drift(r, 0.99 * r)["snr_db"] == 40.0
    assert output_drift(np.zeros(4), np.ones(4))["snr_db"] == float("-inf")


def test_a_failing_target_names_the_route_that_made_its_model():
    from portability.report.markdown import _what_failed
    from portability.report.schema import TargetResult
    from portability.report.table import explain

    convs = [{"converter": "OnnxFromOnnx 2+onnx1.23.2"}, {"converter": "SavedModelFromOnnx 3+onnx2tf1.29.24"},
             {"converter": "TfliteFromSavedModel 3+onnx2tf1.29.24"}]
    t = TargetResult(id="mobile/tflite-fp16", platform="mobile", status="load-error", gating=True, error="FlexErf",
                     details={"conversions": convs})
    assert t.route == "SavedModelFromOnnx → TfliteFromSavedModel"  # the snapshot of ONNX into itself left out
    assert "route SavedModelFromOnnx → TfliteFromSavedModel" in _what_failed(t) and "route" in explain(t)
    ok = TargetResult(id="server/ort-cpu", platform="server", status="pass", gating=True, details={"conversions": convs[:1]})
    assert ok.route is None and "route" not in explain(ok)
