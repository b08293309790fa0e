"""Robustness (``--robustness``): seeded perturbations, their metrics, adversarial examples crafted on a
differentiable source, and a check without the flag left as it was."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import FIXTURES, by_id, check_json, run_cli
from portability.metrics.robustness import perturb
from portability.core.protocol import WorkerResult
from portability.metrics import robustness
from portability.metrics.base import Evaluation

_HAS_TORCH = importlib.util.find_spec("torch") is not None
_HAS_TF = importlib.util.find_spec("tensorflow") is not None
_MOBILE_MISSING = [m for m in ("onnx2tf", "tensorflow", "tf_keras", "ai_edge_litert") if importlib.util.find_spec(m) is None]


def _digits(n: int, nhwc: bool = False) -> tuple[np.ndarray, np.ndarray]:
    with np.load(FIXTURES / ("digits_nhwc.npz" if nhwc else "digits.npz")) as z:
        x, y = z["x"][:n], z["y"][:n]
    return x.reshape((n, 1) + x.shape[1:]), y.reshape(n, 1)  # batches of one, as a check feeds them


# -- the perturbed set ---------------------------------------------------------------------------------------

def test_perturbations_are_seeded_and_stay_in_range():
    x, y = _digits(24)
    a = perturb.build({"x": x}, y, 16, seed=3)
    b = perturb.build({"x": x}, y, 16, seed=3)
    c = perturb.build({"x": x}, y, 16, seed=4)
    assert a.groups == b.groups and np.array_equal(a.arrays["x"], b.arrays["x"])
    assert not np.array_equal(a.arrays["x"], c.arrays["x"])
    fams = {g.family for g in a.groups}
    assert fams == {"gaussian", "uniform", "brightness", "contrast"}  # an image-like float input
    assert a.batches == 16 and a.arrays["x"].shape == (len(a.groups) * 16,) + x.shape[1:]
    assert a.arrays["x"].dtype == np.float32
    assert a.arrays["x"].min() >= 0.0 and a.arrays["x"].max() <= 1.0
    assert np.array_equal(a.labels, y[:16])
    # each group perturbs the same clean rows, more at a higher level
    per_group = a.arrays["x"].reshape(len(a.groups), 16, -1)
    dist = {(g.family, g.level): float(np.abs(per_group[i] - x[:16].reshape(16, -1)).mean()) for i, g in enumerate(a.groups)}
    for fam, levels in perturb.LEVELS.items():
        if fam in fams:
            ds = [dist[(fam, lv)] for lv in levels]
            assert all(d > 0 for d in ds) and ds == sorted(ds), (fam, ds)


def test_integer_ids_are_substituted_inside_their_range():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 100, (8, 1, 16)).astype(np.int64)
    ps = perturb.build({"ids": ids}, None, 8, seed=0, index_bounds={"ids": 100})
    assert {g.family for g in ps.groups} == {"substitution"}
    out = ps.arrays["ids"].reshape(len(ps.groups), 8, 1, 16)
    assert out.dtype == np.int64 and out.min() >= 0 and out.max() < 100
    changed = [float(np.mean(out[i] != ids)) for i in range(len(ps.groups))]
    assert changed == sorted(changed) and changed[-1] > changed[0] > 0


# -- the metric ----------------------------------------------------------------------------------------------

def _scores(pred: np.ndarray, classes: int = 4) -> np.ndarray:
    """Scores ``[batches, 1, classes]`` whose top-1 is ``pred``."""
    s = np.zeros((pred.size, 1, classes), np.float32)
    s[np.arange(pred.size), 0, pred] = 1.0
    return s


def test_flip_rate_and_accuracy_follow_the_predictions():
    n, classes = 10, 4
    rng = np.random.default_rng(5)
    x = rng.random((n, 1, 3, 8, 8), dtype=np.float32)
    y = rng.integers(0, classes, (n, 1))
    ps = perturb.build({"x": x}, y, n, seed=0)
    g = len(ps.groups)
    clean = y.reshape(-1)
    ref_pred = np.tile(clean, g)  # the reference keeps every prediction
    got_pred = ref_pred.copy()
    flips = rng.random(g * n) < 0.3  # the target changes some
    got_pred[flips] = (got_pred[flips] + 1) % classes
    ev = Evaluation(worker=WorkerResult("ok"), outputs={"s": _scores(clean, classes)}, reference={"s": _scores(clean, classes)},
                    output_names=("s",), labels=y, score_name="s", perturbed=ps,
                    perturbed_outputs={"s": _scores(got_pred, classes)}, reference_perturbed={"s": _scores(ref_pred, classes)},
                    adversarial={"available": False, "reason": "none here"})
    r = robustness.summarize(ev)
    rows = [row for fam in r["perturbations"].values() for row in fam]
    want = flips.reshape(g, n).mean(axis=1)
    assert [row["flip_rate"] for row in rows] == pytest.approx(list(want))
    assert [row["accuracy"] for row in rows] == pytest.approx(list(1 - want))
    assert r["worst_flip_rate"] == pytest.approx(want.max())
    for fam, rs in r["perturbations"].items():
        first = next((row["level"] for row in rs if row["flip_rate"] > 0), None)
        assert r["first_disagreement"][fam] == first
    assert r["adversarial"] == {"available": False, "reason": "none here"}
    assert robustness.worst_flip({"robustness": r}) == pytest.approx(want.max())
    # without class scores there is nothing to flip: said, not invented
    no_scores = robustness.summarize(Evaluation(**{**ev.__dict__, "score_name": None}))
    assert no_scores["available"] is False and "class scores" in no_scores["reason"]


# -- whole checks --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lenet_reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("rob")
    common = [str(FIXTURES / "lenet.onnx"), "--dataset", str(FIXTURES / "digits.npz"), "--samples", "48",
              "--targets", "server/ort-cpu,server/ort-cpu-noopt,server/onnx-reference", "--no-history", "-q"]
    (d / "a").mkdir()
    (d / "b").mkdir()
    return check_json(d / "a", *common), check_json(d / "b", *common, "--robustness", "--robustness-samples", "20")


def test_a_check_without_robustness_is_unchanged(lenet_reports):
    plain, rob = lenet_reports
    assert "robustness" not in plain["inputs"]
    assert all(t["metrics"]["robustness"] is None for t in plain["targets"])
    # the robustness pass leaves the clean metrics as they were: drift and accuracy on the clean batches only
    for a, b in zip(plain["targets"], rob["targets"]):
        assert a["id"] == b["id"] and a["status"] == b["status"]
        for k in ("outputs", "top1_agreement", "accuracy", "accuracy_delta"):
            assert a["metrics"][k] == b["metrics"][k], (a["id"], k)
    assert rob["inputs"]["samples"] == plain["inputs"]["samples"] == 48 - 48 // 5  # the rest calibrates (held out)


def test_every_target_reports_robustness_on_one_set(lenet_reports):
    _, rob = lenet_reports
    desc = rob["inputs"]["robustness"]
    assert desc["samples"] == 20 and desc["seed"] == 0
    assert set(desc["families"]) == {"gaussian", "uniform", "brightness", "contrast"}
    for t in rob["targets"]:
        r = t["metrics"]["robustness"]
        assert r["available"] and r["samples"] == 20 and r["score_output"] == "logits"
        assert {f: [row["level"] for row in rows] for f, rows in r["perturbations"].items()} == desc["families"]
        for rows in r["perturbations"].values():
            for row in rows:
                assert 0.0 <= row["accuracy"] <= 1.0 and 0.0 <= row["changed"] <= 1.0
                assert (row["flip_rate"] is None) == (t["id"] == rob["reference"])
    # an ONNX model has no differentiable twin: adversarial robustness is not available, and the report says why
    adv = rob["targets"][0]["metrics"]["robustness"]["adversarial"]
    assert adv["available"] is False and "differentiable" in adv["reason"] and "ONNX" in adv["reason"]
    assert desc["adversarial"] == adv


def test_the_perturbed_set_is_the_same_for_every_target(tmp_path):
    """Each target's job names the one perturbed file, which holds exactly the seeded set."""
    from portability.core.protocol import load_feeds
    from portability.engine import plan
    from portability.settings.options import resolve
    from portability.engine.dispatch import Dispatch, Silent
    from portability.engine.prepare import prepare
    from portability.core.inputs import prepare as prepare_feeds
    from portability.sources import load_source_isolated

    model = load_source_isolated(FIXTURES / "lenet.onnx")
    opts = resolve({"dataset": str(FIXTURES / "digits.npz"), "samples": 12, "robustness": True, "robustness_samples": 6})
    feeds = prepare_feeds(model, opts)
    targets, _, _ = plan.for_check(model.format, "server,mobile", None)
    prepared = prepare(model, feeds, opts, tmp_path)
    run = Dispatch(model, feeds, opts, prepared, Silent(), plan.Planned(targets, {}, {}, {}))
    rob = prepared.robustness
    files = {run.job(t).extra_feeds for t in targets}
    assert files == {str(rob.file)}
    want = perturb.build(feeds.arrays, feeds.labels, 6, opts.seed, opts.value_range, model.index_bounds)
    assert np.array_equal(load_feeds(rob.file, ["x"])["x"], want.arrays["x"])


@pytest.mark.skipif(not _HAS_TORCH, reason="torch not installed: no differentiable source to attack")
def test_fgsm_on_the_torch_source_lowers_its_accuracy():
    """The attack is real: the source model itself loses accuracy on the examples crafted on it."""
    import torch

    from portability.metrics.robustness import adversarial
    from portability.sources import load_source_isolated
    from portability.sources.torch_export import open_program

    model = load_source_isolated(FIXTURES / "torch_cnn.pt2")
    x, y = _digits(32)
    ps = perturb.build({"input": x}, y, 32, seed=0)
    info = adversarial.craft(model, ps, epsilons=(0.1,), steps=5)
    assert info["available"], info
    assert [(g.family, g.level) for g in ps.groups[-2:]] == [("fgsm", 0.1), ("pgd", 0.1)]
    module = open_program(FIXTURES / "torch_cnn.pt2").module()

    def acc(batches: np.ndarray) -> float:
        with torch.no_grad():
            pred = [int(module(torch.from_numpy(b)).argmax()) for b in batches]
        return float(np.mean(np.array(pred) == y.reshape(-1)))

    adv = ps.arrays["input"][-64:]
    fgsm, pgd = adv[:32], adv[32:]
    assert np.abs(fgsm - x).max() <= 0.1 + 1e-6 and np.abs(pgd - x).max() <= 0.1 + 1e-6  # inside the ε-ball
    clean_acc = acc(x)
    assert acc(fgsm) < clean_acc - 0.2, (clean_acc, acc(fgsm))
    assert acc(pgd) <= acc(fgsm)


@pytest.mark.skipif(not _HAS_TF, reason="tensorflow not installed: the Keras source cannot be attacked")
def test_keras_source_reports_attack_success_per_target(tmp_path):
    r = check_json(tmp_path, FIXTURES / "keras_cnn.keras", "--dataset", str(FIXTURES / "digits_nhwc.npz"), "--samples", "32",
                   "--targets", "server/keras,server/tf", "--robustness", "--robustness-samples", "32", "--no-history", "-q")
    t = by_id(r)
    adv = t["server/keras"]["metrics"]["robustness"]["adversarial"]
    assert adv["available"] and adv["success"] == "the prediction differs from the true label"
    assert r["inputs"]["robustness"]["adversarial"]["epsilons"] == [0.01, 0.03, 0.1]
    clean_err = 1 - t["server/keras"]["metrics"]["robustness"]["clean"]["accuracy"]
    pgd = adv["attacks"]["pgd"]
    assert [a["epsilon"] for a in pgd] == [0.01, 0.03, 0.1]
    assert pgd[-1]["success_rate"] > clean_err + 0.2  # the reference falls to its own attack
    other = t["server/tf"]["metrics"]["robustness"]["adversarial"]["attacks"]["pgd"][-1]
    assert other["reference_success_rate"] == pgd[-1]["success_rate"]
    assert other["success_rate_delta"] == pytest.approx(other["success_rate"] - other["reference_success_rate"])


@pytest.mark.mobile
@pytest.mark.skipif(bool(_MOBILE_MISSING), reason=f"mobile stack not installed: {', '.join(_MOBILE_MISSING)}")
def test_int8_target_runs_the_perturbed_batches(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--dataset", str(FIXTURES / "digits.npz"), "--samples", "32",
                   "--targets", "mobile/tflite-fp32,mobile/tflite-int8", "--robustness", "--robustness-samples", "16",
                   "--no-history", "-q", expect_rc=None)
    t = by_id(r)
    for tid in ("mobile/tflite-fp32", "mobile/tflite-int8"):
        if t[tid]["status"] not in ("pass", "drift"):
            pytest.fail(f"{tid} did not run: {t[tid]['status']} {t[tid]['error']}")
        rob = t[tid]["metrics"]["robustness"]
        assert rob["available"] and rob["samples"] == 16 and rob["worst_flip_rate"] is not None
    # fp32 matches the reference's predictions on clean inputs at the smallest noise
    assert t["mobile/tflite-fp32"]["metrics"]["robustness"]["perturbations"]["gaussian"][0]["flip_rate"] == 0.0


def test_robustness_samples_must_be_positive(tmp_path):
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--robustness", "--robustness-samples", "0", "--no-history")
    assert p.returncode == 2
