"""Golden outputs: a check keeps what every target produced, and ``--baseline`` compares outputs with the
baseline's own outputs on the same inputs — so a change that moves every output together (a new version of
the model, a runtime upgrade) is caught, where comparing each run with its own reference sees nothing."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

from conftest import FIXTURES, run_cli
from portability.report import golden


def _perturbed_lenet(folder):
    """The fixture LeNet with five weights of its first convolution scaled by 1.05."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(FIXTURES / "lenet.onnx"))
    init = next(i for i in m.graph.initializer if numpy_helper.to_array(i).ndim == 4)
    a = numpy_helper.to_array(init).copy()
    a.flat[:5] *= 1.05
    init.CopyFrom(numpy_helper.from_array(a, init.name))
    folder.mkdir()
    onnx.save(m, str(folder / "lenet.onnx"))
    return folder / "lenet.onnx"


TARGETS = ("--targets", "server/ort-cpu,server/ort-cpu-noopt")


def test_a_perturbed_model_fails_against_the_originals_outputs_and_a_rerun_passes(tmp_path):
    saved = tmp_path / "base.npz"
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), *TARGETS, "--save-outputs", str(saved))
    assert p.returncode == 0 and saved.is_file(), p.stderr
    p = run_cli("check", str(_perturbed_lenet(tmp_path / "v2")), *TARGETS, "--baseline", str(saved))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "server/ort-cpu output 'logits' changed since the baseline: max_abs" in p.stdout, p.stdout
    assert "server/ort-cpu-noopt output 'logits' changed" in p.stdout
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), *TARGETS, "--baseline", str(saved))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "nothing regressed" in p.stderr


def test_the_history_keeps_outputs_and_diff_shows_what_moved(tmp_path):
    ids = []
    for model in (FIXTURES / "lenet.onnx", _perturbed_lenet(tmp_path / "v2")):
        p = run_cli("check", str(model), *TARGETS)
        ids.append(p.stderr.split("history: run ")[1].split()[0])
    p = run_cli("check", str(_perturbed_lenet(tmp_path / "v3")), *TARGETS, "--baseline", ids[0])
    assert p.returncode == 1 and "output 'logits' changed since the baseline" in p.stdout, p.stdout + p.stderr
    p = run_cli("diff", ids[0], ids[1], "--json")
    changes = json.loads(p.stdout)["changes"]
    assert {c["target"] for c in changes if c["kind"] == "outputs"} == {"server/ort-cpu", "server/ort-cpu-noopt"}


def test_other_inputs_are_said_and_not_compared(tmp_path):
    saved = tmp_path / "base.npz"
    assert run_cli("check", str(FIXTURES / "lenet.onnx"), *TARGETS, "--save-outputs", str(saved)).returncode == 0
    p = run_cli("check", str(_perturbed_lenet(tmp_path / "v2")), *TARGETS, "--baseline", str(saved), "--seed", "7")
    assert p.returncode == 0, p.stdout
    assert "the inputs differ (synthesized seed 0 → synthesized seed 7): outputs not compared" in p.stdout


def test_a_json_report_is_a_baseline_for_outputs_too(tmp_path):
    """The JSON report carries its outputs' digests: against it the perturbed model fails as it does against
    an outputs file, the original passes, other inputs are said (not called drift), and a report written
    without the digests says it holds no outputs."""
    base = tmp_path / "base.json"
    assert run_cli("check", str(FIXTURES / "lenet.onnx"), *TARGETS, "--json", str(base)).returncode == 0
    v2 = _perturbed_lenet(tmp_path / "v2")
    p = run_cli("check", str(v2), *TARGETS, "--baseline", str(base))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "server/ort-cpu output 'logits' changed since the baseline: max_abs" in p.stdout, p.stdout
    assert "server/ort-cpu-noopt output 'logits' changed" in p.stdout
    assert "server/ort-cpu regressed (outputs" in p.stderr, p.stderr
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), *TARGETS, "--baseline", str(base))
    assert p.returncode == 0 and "nothing regressed" in p.stderr, p.stdout + p.stderr
    assert "outputs not compared" not in p.stdout and "changed since the baseline" not in p.stdout, p.stdout
    p = run_cli("check", str(v2), *TARGETS, "--baseline", str(base), "--seed", "7")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "the inputs differ (synthesized seed 0 → synthesized seed 7): outputs not compared" in p.stdout
    older = tmp_path / "older.json"
    older.write_text(json.dumps({k: v for k, v in json.loads(base.read_text()).items() if k != "output_digests"}))
    p = run_cli("check", str(v2), *TARGETS, "--baseline", str(older))
    assert p.returncode == 0 and "holds no outputs" in p.stdout, p.stdout + p.stderr


def test_diff_of_two_json_reports_names_the_moved_outputs(tmp_path):
    """436 digits (500, less the 64 held out to calibrate): 436 x 10 logits, so the report carries a sample of them
    (a few KB), and that is enough."""
    data = ("--dataset", str(FIXTURES / "digits.npz"))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for model, out in ((FIXTURES / "lenet.onnx", a), (_perturbed_lenet(tmp_path / "v2"), b)):
        assert run_cli("check", str(model), *TARGETS, *data, "--json", str(out), "--no-history").returncode == 0
    kept = json.loads(a.read_text())["output_digests"]["targets"]["server/ort-cpu"]["logits"]
    assert kept["shape"] == [436, 1, 10] and not kept["whole"] and len(json.dumps(kept)) < 8 * 1024
    p = run_cli("diff", str(a), str(b), "--json")
    moved = [c for c in json.loads(p.stdout)["changes"] if c["kind"] == "outputs"]
    assert {c["target"] for c in moved} == {"server/ort-cpu", "server/ort-cpu-noopt"}, p.stdout
    assert all(c["metric"].startswith("outputs[logits].") and "sampled elements" in c["text"] for c in moved), moved
    p = run_cli("diff", str(a), str(a), "--json")
    assert not [c for c in json.loads(p.stdout)["changes"] if c["kind"] == "outputs"], p.stdout


def test_damaged_digests_in_a_json_baseline_are_a_one_line_usage_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "tool": {}, "created_at": "", "environment": {}, "model": {},
                               "inputs": {}, "reference": "", "targets": [], "passed": True,
                               "output_digests": {"format": golden.DIGESTS_FORMAT, "inputs": {}, "targets": {"t": {"y": {}}}}}))
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), *TARGETS, "--baseline", str(bad))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "damaged output digests" in lines[0], p.stderr


def test_the_digests_leave_every_other_report_as_it_was(tmp_path, monkeypatch):
    """Terminal table, Markdown, HTML and JUnit of a report are the same bytes with or without its digests;
    its JSON differs by that field alone."""
    from dataclasses import replace

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")  # the date matplotlib writes into each plot
    from rich.console import Console

    from portability.report import files, html, markdown, table
    from portability.report.schema import Report

    path = tmp_path / "r.json"
    assert run_cli("check", str(FIXTURES / "lenet.onnx"), *TARGETS, "--json", str(path), "--no-history").returncode == 0
    full = Report.from_dict(json.loads(path.read_text()))
    bare = replace(full, output_digests={})
    assert full.output_digests and json.loads(files.to_json(full))["output_digests"] == full.output_digests

    def terminal(r):
        c = Console(record=True, width=160, file=io.StringIO())
        c.print(table.render(r))
        return c.export_text()

    for render in (terminal, markdown.render, html.render, files.to_junit):
        assert render(full) == render(bare), render
    d = json.loads(files.to_json(full))
    assert d.pop("output_digests") and d == json.loads(files.to_json(bare))


def test_small_outputs_are_kept_whole_large_ones_sampled_with_digest_and_statistics():
    small = np.arange(40, dtype=np.float32).reshape(4, 10)
    large = np.random.default_rng(0).random((8, 1000, 100)).astype(np.float32)
    g = golden.Golden.of({"digest": "d"}, {"t": {"small": small, "large": large}})
    back, report = golden.Golden.from_bytes(g.to_bytes({"x": 1}))
    assert report == {"x": 1}
    assert back.targets["t"]["small"].whole and np.array_equal(back.targets["t"]["small"].values, small)
    k = back.targets["t"]["large"]
    assert not k.whole and k.values.shape == (golden.SAMPLE,) and k.shape == (8, 1000, 100)
    assert k.stats["max"] == pytest.approx(float(large.max())) and k.digest == golden.digest({"a": large})
    assert g.size_bytes() < 64 * 1024  # bounded: the 3.2 MB output costs a sample


@pytest.mark.parametrize("where", [0, -1])
def test_a_sampled_output_that_moved_outside_the_sample_is_still_seen_by_its_digest(where):
    large = np.zeros((4, 1000, 100), dtype=np.float32)
    moved = large.copy()
    moved.reshape(-1)[where] = 1.0  # the sample may miss it: the digest and statistics do not
    a, b = (golden.Golden.of({"digest": "d"}, {"t": {"y": x}}) for x in (large, moved))
    assert a.targets["t"]["y"].digest != b.targets["t"]["y"].digest
    changes, why = golden.compare(a, b, {"t": {"max_abs": 1e-4, "cosine": 0.9999}})
    assert why is None and [c.target for c in changes] == ["t"], changes
    assert golden.compare(a, a, {"t": {"max_abs": 1e-4}}) == ([], None)


def test_a_not_outputs_file_is_a_one_line_usage_error(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(3))
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), *TARGETS, "--baseline", str(bad))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "not a portability outputs file" in lines[0], p.stderr
