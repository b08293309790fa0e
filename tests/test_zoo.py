"""The study's PyTorch and Keras 3 model zoo (``models/torch``, ``models/keras``): the architectures follow
the spec (shapes, initialization), one optimizer step really trains, the training command is seeded, and
what it exports reloads to the same logits and is a source ``portability check`` accepts."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the study's models live beside the package, not inside it
    sys.path.insert(0, str(ROOT))

from models import common, data, spec  # noqa: E402

FRAMEWORKS = ("torch", "keras")
ARCHS = tuple(spec.ARCHS)
CASES = [(fw, a) for fw in FRAMEWORKS for a in ARCHS]
EXPORT = {"torch": "model.pt2", "keras": "model.keras"}
LAYOUT = {("torch", "image"): "NCHW", ("keras", "image"): "NHWC", ("torch", "text"): "NL", ("keras", "text"): "NL"}


def _need(fw: str) -> None:
    mods = {"torch": ("torch",), "keras": ("keras", "tensorflow")}[fw]
    missing = [m for m in mods if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """``dataset(name) -> .npz`` prepared once per session; skips when its package is not installed."""
    folder, made = tmp_path_factory.mktemp("studydata"), {}

    def get(name: str) -> Path:
        if name not in made:
            try:
                made[name] = data.prepare(name, folder)
            except data.DataUnavailable as e:
                pytest.skip(str(e))
        return made[name]

    return get


@pytest.fixture(scope="session")
def trained(tmp_path_factory, dataset):
    """``trained(fw, arch, seed=0, run=0) -> out folder``: the real training command (``--profile step``),
    run once per key in a subprocess that finds ``models`` only through PYTHONPATH."""
    done: dict[tuple, Path] = {}

    def run(fw: str, arch: str, seed: int = 0, run: int = 0) -> Path:
        key = (fw, arch, seed, run)
        if key not in done:
            _need(fw)
            name = spec.DEFAULT_DATASET[arch]
            out = tmp_path_factory.mktemp(f"{fw}-{arch}-s{seed}-r{run}")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
            p = subprocess.run([sys.executable, "-m", f"models.{fw}.train", "--arch", arch, "--data", str(dataset(name)),
                                "--dataset", name, "--profile", "step", "--seed", str(seed), "--out", str(out / "run")],
                               capture_output=True, text=True, env=env, cwd=out, timeout=600)
            assert p.returncode == 0, f"rc={p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
            done[key] = out / "run"
        return done[key]

    return run


def reload_logits(fw: str, path: Path, x: np.ndarray) -> np.ndarray:
    """The exported model's logits, loaded the way a consumer would (no training code involved)."""
    if fw == "torch":
        import torch

        m = torch.export.load(path).module()
        with torch.no_grad():
            return m(torch.from_numpy(x)).numpy()
    import keras

    return np.asarray(keras.saving.load_model(path, safe_mode=True, compile=False).predict(x, verbose=0))


def seed_(fw: str, seed: int) -> None:
    """Seed the framework in this process (the training command's other settings, deterministic ops and
    thread counts, are process-wide and stay out of the test process)."""
    if fw == "torch":
        import torch

        torch.manual_seed(seed)
    else:
        import keras

        keras.utils.set_random_seed(seed)


def train_module(fw: str):
    _need(fw)
    import importlib

    return importlib.import_module(f"models.{fw}.train")


# ----- architecture: the spec, in each framework ---------------------------------------------------------

def _weights(fw: str, model) -> dict[str, np.ndarray]:
    if fw == "torch":
        return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    return {w.path: np.asarray(w.numpy()).copy() for w in model.trainable_weights}


def _glorot_limit(fw: str, name: str, w: np.ndarray) -> float:
    if w.ndim == 2:
        fan_in, fan_out = (w.shape[1], w.shape[0]) if fw == "torch" else w.shape
    elif fw == "torch":  # [out, in, kh, kw]
        rf = w.shape[2] * w.shape[3]
        fan_in, fan_out = w.shape[1] * rf, w.shape[0] * rf
    else:  # [kh, kw, in, out]
        rf = w.shape[0] * w.shape[1]
        fan_in, fan_out = w.shape[2] * rf, w.shape[3] * rf
    return float(np.sqrt(6.0 / (fan_in + fan_out)))


@pytest.mark.parametrize("fw,arch", CASES)
def test_the_initialization_is_the_specs(fw, arch):
    t = train_module(fw)
    classes = spec.DATASETS[spec.DEFAULT_DATASET[arch]]["classes"]
    seed_(fw, 0)
    model = t.build(arch, classes)
    seen = set()
    for name, w in _weights(fw, model).items():
        low = name.lower()
        if "embed" in low:
            assert np.abs(w).max() <= 0.05 and np.abs(w).max() > 0.049 and w.std() > 0.02, name
            seen.add("embedding")
        elif w.ndim == 1:  # biases zero (both LSTM bias vectors, forget gate included); BN γ=1 (torch: weight), β=0
            want = 1.0 if low.endswith(("gamma", "weight")) else 0.0
            assert np.all(w == want), f"{name}: {w.ravel()[:8]}"
            seen.add("bias")
        else:  # conv/dense kernels, LSTM input and recurrent kernels: Glorot uniform
            limit = _glorot_limit(fw, name, w)
            assert np.abs(w).max() <= limit * (1 + 1e-6), f"{name}: beyond the Glorot limit {limit}"
            assert np.abs(w).max() > 0.9 * limit and abs(w.std() - limit / np.sqrt(3)) < 0.25 * limit / np.sqrt(3), \
                f"{name}: std {w.std()} is not uniform on ±{limit}"
            seen.add("kernel")
    assert "kernel" in seen and "bias" in seen
    if fw == "keras":
        import keras

        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                assert (layer.epsilon, layer.momentum) == (spec.ARCHS[arch]["bn_eps"], spec.ARCHS[arch]["bn_momentum"])
            if isinstance(layer, keras.layers.LSTM):
                assert layer.cell.unit_forget_bias is False
            assert not isinstance(layer, keras.layers.Lambda)
    else:
        import torch

        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                assert (m.eps, m.momentum) == pytest.approx((spec.ARCHS[arch]["bn_eps"], 1 - spec.ARCHS[arch]["bn_momentum"]))


@pytest.mark.parametrize("arch", ARCHS)
def test_both_frameworks_build_the_same_layers(arch):
    """The same weight tensors (sizes; layouts differ) and logits of the same shape; PyTorch's LSTM has
    two bias vectors where Keras has one."""
    t, k = train_module("torch"), train_module("keras")
    classes = spec.DATASETS[spec.DEFAULT_DATASET[arch]]["classes"]
    seed_("torch", 0), seed_("keras", 0)
    tm, km = t.build(arch, classes), k.build(arch, classes)
    tw, kw = _weights("torch", tm), _weights("keras", km)
    if arch == "lstm":
        extra = [n for n in tw if n == "lstm.bias_hh_l0"]
        assert extra and tw[extra[0]].size == 4 * spec.ARCHS[arch]["hidden"]
        tw.pop(extra[0])
    assert sorted(w.size for w in tw.values()) == sorted(w.size for w in kw.values())
    raw = sample_inputs(arch)
    xt, xk = t.to_input(raw), k.to_input(raw)
    assert t.predict(tm, xt).shape == k.predict(km, xk).shape == (len(raw), classes)


def sample_inputs(arch: str, n: int = 3) -> np.ndarray:
    """Canonical-layout inputs (synthetic: the architecture test needs shapes, not data)."""
    rng = np.random.default_rng(0)
    if spec.ARCHS[arch]["task"] == "image":
        return rng.random((n, 28, 28), dtype=np.float32)
    return rng.integers(0, spec.TEXT["vocab"], (n, spec.TEXT["length"])).astype(np.int32)


# ----- one optimizer step trains ------------------------------------------------------------------------

@pytest.mark.parametrize("fw,arch", CASES)
def test_one_step_moves_every_weight_by_about_the_learning_rate(fw, arch, dataset):
    """Adam's first step moves each weight by lr·g/(|g|+ε) (< lr, ≈ lr where |g| ≫ ε): every trainable
    tensor moves, none by more than the spec's lr, each by nearly lr somewhere."""
    t = train_module(fw)
    with np.load(dataset(spec.DEFAULT_DATASET[arch])) as z:
        x, y = t.to_input(z["x_train"][:256]), z["y_train"][:256]
    classes = spec.DATASETS[spec.DEFAULT_DATASET[arch]]["classes"]
    seed_(fw, 0)
    model = t.build(arch, classes)
    step = t.make_step(model, t.optimizer(model, arch), x, y) if fw == "torch" else t.make_step(model, x, y)
    before = _weights(fw, model)
    idx = next(common.batches(len(y), spec.ARCHS[arch]["batch"], seed=0, epoch=0))
    lr = common.learning_rate(spec.ARCHS[arch]["lr"], 0, 10)  # the schedule's first step: the spec's lr
    loss = step(idx, lr)
    assert np.isfinite(loss) and 0 < loss < 10
    after = _weights(fw, model)
    for name, w0 in before.items():
        moved, bound = np.abs(after[name] - w0).max(), lr
        if fw == "keras" and "embed" in name.lower():
            # Keras's Adam on TensorFlow updates an embedding from its sparse gradient and squares each
            # occurrence of a token separately: v gets Σg² where Adam has (Σg)², so a row seen k times in
            # the batch can move by up to √k·lr (PyTorch's dense gradient: ≤ lr)
            bound = lr * np.sqrt(np.unique(x[idx], return_counts=True)[1].max())
        assert 0.5 * lr < moved <= bound * (1 + 1e-3), f"{name}: moved {moved} (lr {lr}, bound {bound})"


# ----- the training command -----------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("fw,arch", CASES)
def test_the_training_command_exports_what_it_evaluated(fw, arch, trained, dataset):
    out = trained(fw, arch)
    meta = json.loads((out / "meta.json").read_text())
    b = spec.budget("step", arch)
    task = spec.ARCHS[arch]["task"]
    assert (meta["framework"], meta["arch"], meta["profile"], meta["seed"]) == (fw, arch, "step", 0)
    assert len(meta["history"]) == 1 and np.isfinite(meta["history"][0]["loss"])
    assert meta["export"]["status"] == "ok", meta["export"]
    assert meta["export"]["file"] == EXPORT[fw] and (out / EXPORT[fw]).is_file()

    ev = np.load(out / "eval.npz")
    x, y = ev["x"], ev["y"]
    with np.load(dataset(spec.DEFAULT_DATASET[arch])) as z:
        assert np.array_equal(y, z["y_test"][: b["eval"]])  # the first eval samples of the test split
        want_x = z["x_test"][: b["eval"]]
    assert x.shape[0] == b["eval"] == meta["eval_samples"]
    inp = meta["input"]
    assert inp["shape"] == [None, *x.shape[1:]] and inp["dtype"] == str(x.dtype) and inp["layout"] == LAYOUT[fw, task]
    if task == "image":
        assert x.dtype == np.float32
        assert x.shape[1:] == ((1, 28, 28) if fw == "torch" else (28, 28, 1))
        assert np.array_equal(x.reshape(want_x.shape), want_x)
    else:
        assert x.dtype == np.int32 and np.array_equal(x, want_x)

    logits = np.load(out / "eval_logits.npy")
    assert logits.shape == (len(y), spec.DATASETS[meta["dataset"]]["classes"]) and np.isfinite(logits).all()
    assert meta["accuracy_eval"] == pytest.approx(common.accuracy(logits, y))
    got = reload_logits(fw, out / EXPORT[fw], x)
    assert np.abs(got - logits).max() <= 1e-5, np.abs(got - logits).max()
    assert meta["export"]["max_abs_vs_framework"] <= 1e-5
    if fw == "torch":  # the batch dimension is dynamic: one sample at a time gives the same logits
        one = np.concatenate([reload_logits(fw, out / EXPORT[fw], x[i: i + 1]) for i in range(3)])
        assert np.abs(one - logits[:3]).max() <= 1e-5
        assert meta["input"]["name"] == meta["export"]["input"]


@pytest.mark.slow
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_the_same_seed_trains_the_same_model(fw, trained):
    a, b, other = trained(fw, "lenet1"), trained(fw, "lenet1", run=1), trained(fw, "lenet1", seed=1)
    la, lb, lo = (np.load(d / "eval_logits.npy") for d in (a, b, other))
    assert np.array_equal(la, lb)
    ha, hb = (json.loads((d / "meta.json").read_text())["history"][0]["loss"] for d in (a, b))
    assert ha == hb
    assert np.abs(la - lo).max() > 1e-3  # and the seed is what decides it


@pytest.mark.slow
@pytest.mark.parametrize("fw,arch,targets", [("torch", "lenet5", "server/torch,server/ort-cpu"),
                                             ("keras", "lenet5", "server/keras,server/ort-cpu")])
def test_the_export_is_a_source_portability_checks(fw, arch, targets, trained):
    pytest.importorskip("onnxruntime")
    if fw == "torch":
        pytest.importorskip("onnxscript")
    else:
        pytest.importorskip("tf2onnx")
    import portability

    out = trained(fw, arch)
    meta = json.loads((out / "meta.json").read_text())
    r = portability.check(out / EXPORT[fw], targets, dataset=out / "eval.npz", runs=3, calibrate_on_eval=True)  # every sample
    assert r.model["format"] == fw
    assert [(t.id, t.status) for t in r.targets] == [(tid, "pass") for tid in targets.split(",")], \
        [(t.id, t.status, t.error) for t in r.targets]
    # the reference runtime's accuracy on eval.npz is the training command's in-framework accuracy
    assert r.targets[0].metrics["accuracy"] == pytest.approx(meta["accuracy_eval"])


def test_the_learning_rate_decays_on_a_cosine_to_zero():
    lr = [common.learning_rate(1e-3, t, 100) for t in range(101)]
    assert lr[0] == pytest.approx(1e-3) and lr[50] == pytest.approx(5e-4) and lr[100] == pytest.approx(0, abs=1e-12)
    assert all(a > b for a, b in zip(lr, lr[1:]))
