"""Calibration that tells the truth: what calibrated each static-int8 variant is in its report (its samples, how
many, the method), synthesized calibration comes with a warning, ``--calibration FILE`` calibrates apart from the
evaluated samples, and with ``--dataset`` a held-out share calibrates — never the evaluated samples unless
``--calibrate-on-eval`` says so. Real checks of the fixture LeNet on ``server/ort-qdq`` (ONNX Runtime's static
QDQ quantizer: sub-second)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import FIXTURES, by_id, check_json, run_cli

DIGITS = FIXTURES / "digits.npz"
LENET = FIXTURES / "lenet.onnx"
QDQ = "server/ort-qdq"
FAST = ("--runs", "2", "--warmup", "0", "--no-history")


def _rows(path) -> np.ndarray:
    with np.load(path) as z:
        return z["in0"].reshape(-1, 1, 28, 28)


def test_the_held_out_share_calibrates_and_is_not_evaluated(tmp_path):
    """With --dataset alone its last min(64, n // 5) samples calibrate, the rest are evaluated: disjoint, whole."""
    from portability.core import inputs as inp
    from portability.engine.prepare import prepare
    from portability.settings.options import resolve
    from portability.sources import load_source_isolated

    model = load_source_isolated(LENET)
    opts = resolve({"dataset": str(DIGITS)})
    feeds = inp.prepare(model, opts)
    p = prepare(model, feeds, opts, tmp_path)
    assert (p.calibration_source, p.calibration_facts["given"], p.calibration_facts["held_out"]) == ("dataset", 64, True)
    held, evaluated = _rows(p.calibration), _rows(p.feeds_file)
    x = np.load(DIGITS)["x"]
    assert len(held) == 64 and len(evaluated) == feeds.samples == len(feeds.labels) == 500 - 64
    assert np.array_equal(evaluated, x[:436]) and np.array_equal(held, x[436:])  # the last ones, none of them evaluated
    assert np.array_equal(feeds.labels.ravel(), np.load(DIGITS)["y"][:436])


def test_the_report_says_what_calibrated_the_variant(tmp_path):
    html = tmp_path / "r.html"
    r = check_json(tmp_path, LENET, "-t", QDQ, "--dataset", str(DIGITS), "--html", str(html), *FAST)
    t = by_id(r)[QDQ]
    cal = t["details"]["calibration"]
    assert {k: cal[k] for k in ("source", "samples", "held_out", "given", "method")} == \
        {"source": "dataset", "samples": 64, "held_out": True, "given": 64, "method": "MinMax"}
    assert r["inputs"]["samples"] == 500 - cal["samples"]  # evaluation: every sample but the held-out ones
    assert any("held out from evaluation" in n and "64 samples" in n for n in t["notes"])
    assert any(n.startswith("--dataset: its last 64 of 500 samples are held out") for n in r["notes"])
    assert "calibration" not in by_id(r)["server/ort-cpu"]["details"]  # the float reference calibrates nothing
    assert "held out from evaluation" in html.read_text()


def test_a_calibration_file_calibrates_apart_and_every_dataset_sample_is_evaluated(tmp_path):
    x = np.load(DIGITS)["x"]
    np.savez(tmp_path / "cal.npz", x=np.clip(x[:40] * 0.9 + 0.05, 0, 1))  # samples of their own (and no labels)
    r = check_json(tmp_path, LENET, "-t", QDQ, "--dataset", str(DIGITS), "--calibration", str(tmp_path / "cal.npz"), *FAST)
    cal = by_id(r)[QDQ]["details"]["calibration"]
    assert (cal["source"], cal["samples"], cal["given"], cal["held_out"]) == ("file", 40, 40, True)
    assert cal["path"].endswith("cal.npz") and r["inputs"]["samples"] == 500  # nothing held out of the dataset
    assert not any("held out" in n for n in r["notes"])


def test_calibrating_on_the_evaluated_samples_is_asked_for_and_said(tmp_path):
    import portability

    r = portability.check(LENET, QDQ, DIGITS, calibrate_on_eval=True, samples=100, runs=2, warmup=0)
    t = {x.id: x for x in r.targets}[QDQ]
    assert r.inputs["samples"] == 100
    assert (t.details["calibration"]["held_out"], t.details["calibration"]["why"]) == (False, "--calibrate-on-eval")
    assert any("of the evaluated --dataset samples (--calibrate-on-eval)" in n for n in t.notes)


def test_calibration_on_synthesized_inputs_is_a_visible_warning(tmp_path):
    from portability.report.calibration import WARNING

    out, html = tmp_path / "r.json", tmp_path / "r.html"
    p = run_cli("check", str(LENET), "-t", QDQ, "--json", str(out), "--html", str(html), *FAST)
    assert p.returncode == 0, p.stderr
    import json

    r = json.loads(out.read_text())
    t = by_id(r)[QDQ]
    assert t["details"]["calibration"]["source"] == "synthesized" and not t["details"]["calibration"]["held_out"]
    assert any(n.startswith(WARNING) for n in t["notes"])  # the target's note (JSON, HTML)
    assert any(n.startswith(WARNING) and QDQ in n for n in r["notes"])  # the check's, naming it
    assert f"warning: {WARNING}" in " ".join(p.stderr.split())  # the terminal says it as a warning
    assert f"warning: {WARNING}" in html.read_text()


def _bad_files(tmp_path):
    x = np.load(DIGITS)["x"]
    np.savez(tmp_path / "shape.npz", x=x[:8, :, :20])
    np.savez(tmp_path / "name.npz", images=x[:8])
    (tmp_path / "junk.npz").write_text("not an archive")
    np.savez(tmp_path / "nan.npz", x=np.full((2, 1, 28, 28), np.nan, np.float32))
    return {"shape.npz": "samples have shape [1, 20, 28], expected [1, 28, 28]", "name.npz": "no array for input 'x'",
            "junk.npz": "not a readable .npz file", "nan.npz": "NaN/Inf", "absent.npz": "file not found"}


def test_a_bad_calibration_file_is_a_usage_error_in_one_line(tmp_path):
    for name, said in _bad_files(tmp_path).items():
        p = run_cli("check", str(LENET), "-t", QDQ, "--dataset", str(DIGITS), "--calibration", str(tmp_path / name),
                    "--no-history", "-q")
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, (name, p.stderr)
        assert lines[0].startswith("error: --calibration") and said in lines[0], (name, lines)


def test_the_calibration_file_is_checked_against_the_conversion_shapes():
    """Unit: 'x' or the input's name, the shapes converters see, dtypes of the same kind converted."""
    from portability.core.errors import BadInput
    from portability.engine.prepare import read_calibration
    from portability.sources import load_source_isolated

    model = load_source_isolated(LENET)
    rows = read_calibration(model, DIGITS, {"x": (1, 28, 28)})  # a dataset file serves as it is ('y' ignored)
    assert rows["x"].shape == (500, 1, 28, 28) and rows["x"].dtype == np.float32
    with pytest.raises(BadInput, match="expected \\[1, 32, 32\\]"):
        read_calibration(model, DIGITS, {"x": (1, 32, 32)})


@pytest.mark.parametrize("n, batch, held", [(500, 1, 64), (100, 1, 20), (4, 1, 0), (9, 1, 1), (50, 4, 8), (12, 4, 0)])
def test_the_split_rule(tmp_path, n, batch, held):
    """The last min(64, n // 5) samples, in whole batches; none where that is under one batch."""
    from types import SimpleNamespace

    from portability.core.inputs import Feeds
    from portability.engine.prepare import _held_out

    nb = n // batch
    feeds = Feeds({"x": np.arange(nb * batch, dtype=np.float32).reshape(nb, batch, 1)}, "dataset",
                  labels=np.zeros((nb, batch), np.int64))
    opts = SimpleNamespace(dataset="d.npz", calibrate_on_eval=False)
    cal = _held_out(feeds, opts, tmp_path / "c.npz", ("x",))
    assert cal.facts["held_out"] == bool(held) and feeds.samples == nb * batch - held
    assert cal.facts["given"] == (held or nb * batch) and len(feeds.labels) == feeds.batches
    if held:
        assert cal.facts["evaluated"] == feeds.samples and cal.file


def test_calibration_is_a_setting_of_files_flags_and_the_api(tmp_path):
    from portability.settings.config import load_config
    from portability.settings.options import resolve

    (tmp_path / "portability.toml").write_text('calibration = "data/cal.npz"\ncalibrate_on_eval = false\n')
    cfg = load_config(tmp_path / "portability.toml")
    assert cfg["calibration"] == str((tmp_path / "data" / "cal.npz").resolve())
    opts = resolve(cfg, {"calibrate_on_eval": True})
    assert str(opts.calibration).endswith("cal.npz") and opts.calibrate_on_eval
    out = run_cli("check", "--help", env={"COLUMNS": "300"}).stdout
    assert "--calibration" in out and "--calibrate-on-eval" in out
