"""Settings are declared once (``settings.options.SETTINGS`` and the metrics' thresholds): the flags, the
settings file's keys, the API's keyword arguments and the help texts' defaults all come from it."""
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from portability.cli.options import takes_settings
from portability.core.errors import UsageError
from portability.settings.config import keys, load_config
from portability.settings.options import resolve, setting, settings


def _capture(command: str) -> typer.Typer:
    app = typer.Typer()
    seen: dict = {}

    @app.command()
    @takes_settings(command)
    def run(model: str = typer.Argument(...), **values):
        seen.update(values, model=model)

    app.seen = seen
    return app


def test_flags_reach_the_command_under_the_settings_own_names():
    app = _capture("check")
    r = CliRunner().invoke(app, ["m.onnx", "--shape", "x=1x4", "--no-cache", "--max-abs", "0.1", "--robustness",
                                 "-t", "web", "--gate", "-web/ort-webgl", "--timeout", "9"])
    assert r.exit_code == 0, r.output
    got = app.seen
    assert got["model"] == "m.onnx"
    assert (got["shapes"], got["use_cache"], got["max_abs"], got["robustness"], got["targets"], got["gate"],
            got["timeout"]) == (["x=1x4"], False, 0.1, True, "web", ["-web/ort-webgl"], 9.0)
    left_out = {k for k, v in got.items() if v is None}
    assert {"via", "seed", "runs", "dataset", "cosine", "versions"} <= left_out
    opts = resolve({k: v for k, v in got.items() if k != "model"})
    assert (opts.shapes, opts.use_cache, opts.thresholds, opts.limits.run_timeout_s, opts.timeout_explicit) == \
        (["x=1x4"], False, {"max_abs": 0.1}, 9.0, True)


def test_each_command_takes_only_its_settings():
    audit = _capture("audit")
    assert CliRunner().invoke(audit, ["m", "--samples", "3", "--jobs", "2"]).exit_code == 0
    assert set(audit.seen) - {"model"} == {s.name for s in settings() if "audit" in s.commands}
    r = CliRunner().invoke(audit, ["m", "--via", "onnx"])
    assert r.exit_code == 2 and "No such option" in r.output


def test_check_help_shows_every_flag_with_the_declared_default():
    out = subprocess.run([sys.executable, "-m", "portability", "check", "--help"], capture_output=True, text=True,
                         env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"}).stdout
    for s in settings():
        if "check" in s.commands and s.decls:
            assert s.option in out, s.name
            if "{default}" in s.help:
                assert s.help_text().split("(default")[-1].split(")")[0].strip() in out, s.name
    assert "(default 300)" in out and "(default 0.0001)" in out and "default 64" in out


def test_a_settings_file_takes_every_check_setting_a_file_can_give(tmp_path):
    known = keys()
    assert {"via", "robustness", "robustness_samples", "sandbox", "versions", "use_cache", "time_budget"} <= set(known)
    (tmp_path / "data").mkdir()
    (tmp_path / "portability.toml").write_text('via = "onnx"\nrobustness = true\nrobustness_samples = 16\n'
                                                'use_cache = false\ndataset = "data/d.npz"\n'
                                                '[thresholds]\ncosine = 0.99\n')
    cfg = load_config(tmp_path / "portability.toml")
    opts = resolve(cfg, {"robustness_samples": 8})  # flags over the file
    assert (opts.via, opts.robustness, opts.robustness_samples, opts.use_cache, opts.thresholds) == \
        ("onnx", True, 8, False, {"cosine": 0.99})
    assert opts.dataset == tmp_path / "data" / "d.npz"
    (tmp_path / "portability.toml").write_text("robustness = 3\n")
    with pytest.raises(UsageError, match="'robustness' has the wrong type"):
        load_config(tmp_path / "portability.toml")


@pytest.mark.parametrize("given, why", [
    ({"robustness_samples": 0}, "--robustness-samples must be at least 1"),
    ({"warmup": -1}, "--warmup must be at least 0"),
    ({"seed": "x"}, "--seed must be a whole number"),
    ({"colour": "red"}, "unknown option 'colour'"),
    ({"thresholds": {"tightness": 1}}, "unknown threshold 'tightness'"),
])
def test_a_bad_setting_is_one_usage_error_naming_it(given, why):
    with pytest.raises(UsageError, match=why):
        resolve(given)


def test_threshold_flags_come_from_the_metrics():
    from portability.metrics import threshold_flags

    flags = {setting(t.flag.lstrip("-").replace("-", "_")).threshold: t for t in threshold_flags().values()}
    assert set(flags) == set(threshold_flags()) and "top1_agreement" in flags
    assert resolve({"min_top1": 0.5}).thresholds == {"top1_agreement": 0.5}


def test_scores_output_chooses_the_output_accuracy_reads(tmp_path):
    """A setting added by its declaration alone reaches the flag, the API and the check."""
    import numpy as np
    import onnxruntime as ort

    import portability
    from conftest import FIXTURES, run_cli

    model = FIXTURES / "two_outputs.onnx"
    x = np.random.default_rng(0).random((16, 8), dtype=np.float32)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    y = np.array([int(np.argmax(sess.run(["features"], {"x": b[None]})[0])) for b in x])
    np.savez(tmp_path / "d.npz", x=x, y=y)
    chosen = portability.check(model, targets="server/ort-cpu", dataset=tmp_path / "d.npz", scores_output="features",
                               runs=0)
    default = portability.check(model, targets="server/ort-cpu", dataset=tmp_path / "d.npz", runs=0)
    assert chosen.targets[0].metrics["accuracy"] == 1.0
    assert default.targets[0].metrics["accuracy"] < 1.0  # 'probs' (4 classes) is read by default
    bad = run_cli("check", str(model), "--scores-output", "nope", "--no-history")
    assert bad.returncode == 2 and "--scores-output nope: the model has no such output (outputs: probs, features)" in bad.stderr
