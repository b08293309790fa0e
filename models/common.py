"""What every framework's training command shares (numpy only; runs in MXNet's environment too).

The contract, ``python -m models.<framework>.train``::

    --arch lenet5 --data DATASET.npz --profile quick --seed 0 --out DIR

trains ``arch`` on the prepared dataset (``models.data.prepare``) within the profile's budget
(``spec.budget``), evaluates it in its own framework, exports it, and writes into ``DIR``:

- the model, as the study feeds it to ``portability check``: ``model.pt2`` (``torch.export``, dynamic
  batch), ``model.keras`` (Keras 3), or ``model.onnx`` (MXNet's own ONNX exporter; MXNet has no format
  the platforms read);
- ``eval.npz``: the held-out samples every target is evaluated on (the first ``budget.eval`` test
  samples), ``x`` in the model's own input layout and dtype, ``y`` the labels;
- ``meta.json``: :func:`write_meta`'s record (in-framework accuracy on those samples is the baseline of
  the study's row; training history; the export's status and error);
- ``weights.npz`` (PyTorch): the trained weights under their ``state_dict`` names, in module order — what
  ``--weights-from`` loads into the Keras and MXNet definitions of the same architecture (the study's
  same-weights experiment: no training, the weights converted layer by layer, see :func:`weight_groups`).

Progress goes to stdout as JSON lines (``{"event": "epoch", ...}``). A failed export still writes
``meta.json`` with ``export.status = "error"`` and exits 0: the study reports it as a row. Exit status 1
means training itself failed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from models import spec


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="train one study model, evaluate it in-framework, export it")
    p.add_argument("--arch", required=True, choices=sorted(spec.ARCHS))
    p.add_argument("--data", required=True, type=Path, help="a dataset .npz from models.data.prepare")
    p.add_argument("--dataset", default=None, help="the dataset's name (recorded)")
    p.add_argument("--profile", default="quick", choices=sorted(spec.PROFILES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--weights-from", type=Path, default=None,
                   help="train nothing: load these weights (a PyTorch trainer's weights.npz) into this framework's "
                        "definition, layouts converted (models.common.weight_groups), then evaluate and export")
    a = p.parse_args(argv)
    a.dataset = a.dataset or a.data.stem
    return a


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def load(args) -> dict:
    """The training and evaluation arrays within the profile's budget (canonical layout: images
    ``[N, 28, 28]`` float32, text ``[N, L]`` int32), and the budget."""
    b = spec.budget(args.profile, args.arch)
    with np.load(args.data, allow_pickle=False) as z:
        xtr, ytr, xte, yte = z["x_train"], z["y_train"], z["x_test"], z["y_test"]
    if b["train"]:
        xtr, ytr = xtr[: b["train"]], ytr[: b["train"]]
    n_eval = min(b["eval"] or len(yte), len(yte))
    return {"x_train": xtr, "y_train": ytr, "x_eval": xte[:n_eval], "y_eval": yte[:n_eval],
            "x_test": xte, "y_test": yte, "budget": b, "classes": int(ytr.max()) + 1 if len(ytr) else 0}


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of one epoch: identical in every framework."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def batches(n: int, batch: int, seed: int, epoch: int, max_batches: int | None = None):
    """Index arrays of one epoch's mini-batches (the last may be short)."""
    order = epoch_order(n, seed, epoch)
    for k, i in enumerate(range(0, n, batch)):
        if max_batches is not None and k >= max_batches:
            return
        yield order[i: i + batch]


def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float((np.asarray(logits).argmax(-1) == y).mean()) if len(y) else float("nan")


def image_layout(x: np.ndarray, channels_last: bool) -> np.ndarray:
    """``[N, 28, 28]`` → ``[N, 28, 28, 1]`` or ``[N, 1, 28, 28]``."""
    return (x[..., None] if channels_last else x[:, None]).astype(np.float32)


def learning_rate(base: float, done: int, total: int) -> float:
    """The spec's schedule: cosine decay from ``base`` to 0 over the run, per optimizer step
    (``done`` steps taken before this one, of ``total``)."""
    return base * 0.5 * (1.0 + math.cos(math.pi * done / max(total, 1)))


def train_loop(args, data: dict, step, evaluate) -> list[dict]:
    """The shared epoch loop: ``step(idx, lr) -> loss`` runs one optimizer step on those training samples
    at that learning rate (:func:`learning_rate`); ``evaluate() -> eval accuracy``. Returns the history
    (also emitted as progress)."""
    b, history = data["budget"], []
    n = len(data["y_train"])
    bs, base = spec.ARCHS[args.arch]["batch"], spec.ARCHS[args.arch]["lr"]
    per_epoch = -(-n // bs) if b["max_batches"] is None else min(-(-n // bs), b["max_batches"])
    total, done = per_epoch * b["epochs"], 0
    for epoch in range(b["epochs"]):
        t0, losses = time.perf_counter(), []
        for idx in batches(n, bs, args.seed, epoch, b["max_batches"]):
            losses.append(float(step(idx, learning_rate(base, done, total))))
            done += 1
        acc = evaluate()
        rec = {"epoch": epoch + 1, "epochs": b["epochs"], "loss": float(np.mean(losses)) if losses else None,
               "eval_accuracy": acc, "seconds": round(time.perf_counter() - t0, 3)}
        history.append(rec)
        emit("epoch", **rec)
    return history


def check_task(args, data: dict) -> str:
    """The architecture's task, after checking the dataset fits it; creates the output folder."""
    task = spec.ARCHS[args.arch]["task"]
    if (task == "image") != (data["x_train"].ndim == 3):
        raise SystemExit(f"{args.arch} is a {task} architecture; {args.data} holds {data['x_train'].shape[1:]} samples")
    args.out.mkdir(parents=True, exist_ok=True)
    return task


def fit(args, data: dict, model, step, predict, export, x_eval, x_test) -> dict:
    """Train (``train_loop``), evaluate in-framework (``eval_logits.npy``), export: the fields of
    :func:`write_meta` that every framework computes alike. ``predict(model, x) -> logits``;
    ``export(model, x_eval, logits, out) -> (file name, extra)``."""
    t0 = time.perf_counter()
    history = [] if args.weights_from else train_loop(args, data, step, lambda: accuracy(predict(model, x_eval), data["y_eval"]))
    train_seconds = time.perf_counter() - t0
    logits = predict(model, x_eval)
    np.save(args.out / "eval_logits.npy", logits)
    return {"history": history, "train_seconds": train_seconds, "accuracy_eval": accuracy(logits, data["y_eval"]),
            "accuracy_test": accuracy(predict(model, x_test), data["y_test"]),
            "export": run_export(args.out, lambda: export(model, x_eval, logits, args.out))}


def run_export(out: Path, export) -> dict:
    """Run ``export() -> (file name, extra fields)``; an exception becomes ``{"status": "error"}``."""
    t0 = time.perf_counter()
    try:
        name, extra = export()
        return {"status": "ok", "file": name, "seconds": round(time.perf_counter() - t0, 3), **(extra or {})}
    except Exception as e:  # noqa: BLE001 - a failed export is a result, recorded with its message
        msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:500]
        return {"status": "error", "error": f"{type(e).__name__}: {msg}", "traceback": traceback.format_exc()[-4000:],
                "seconds": round(time.perf_counter() - t0, 3)}


def write_meta(args, *, framework: str, version: str, data: dict, history: list[dict], train_seconds: float,
               accuracy_eval: float, accuracy_test: float, params: int, input_spec: dict, export: dict,
               eval_x: np.ndarray) -> dict:
    """``eval.npz`` and ``meta.json`` in ``args.out``."""
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(args.out / "eval.npz", x=eval_x, y=data["y_eval"])
    meta = {"framework": framework, "version": version, "arch": args.arch, "dataset": args.dataset,
            "profile": args.profile, "seed": args.seed, "budget": data["budget"],
            "train_samples": int(len(data["y_train"])), "eval_samples": int(len(data["y_eval"])),
            "test_samples": int(len(data["y_test"])), "train_seconds": round(train_seconds, 3),
            "history": history, "accuracy_eval": accuracy_eval, "accuracy_test": accuracy_test,
            "params": int(params), "input": input_spec, "export": export, "python": sys.version.split()[0],
            "weights_from": str(args.weights_from) if args.weights_from else None}
    tmp = args.out / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, args.out / "meta.json")
    emit("done", accuracy_eval=accuracy_eval, export=export["status"])
    return meta


def read_weights(path: Path) -> dict:
    """A ``weights.npz`` (``--weights-from``): name → float32 array, in the file's order (no pickles)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: np.asarray(z[k], dtype=np.float32) for k in z.files}


def weight_groups(weights: dict) -> list[tuple[str, str, dict]]:
    """PyTorch's weights grouped per layer, in module order: ``(prefix, kind, {suffix: array})`` with kind
    ``conv`` (weight ``[O, I, kh, kw]``, bias?), ``dense`` (weight ``[out, in]``, bias), ``bn`` (weight γ,
    bias β, running_mean, running_var), ``embed`` (weight ``[V, E]``) or ``lstm`` (weight_ih_l0 ``[4H, in]``,
    weight_hh_l0 ``[4H, H]``, bias_ih_l0, bias_hh_l0; gates i, f, g, o). Each framework's loader converts
    them to its own layouts."""
    groups: dict[str, dict] = {}
    for name, w in weights.items():
        prefix, _, suffix = name.rpartition(".")
        groups.setdefault(prefix, {})[suffix] = w
    out = []
    for prefix, g in groups.items():
        if "running_mean" in g:
            kind = "bn"
        elif "weight_ih_l0" in g:
            kind = "lstm"
        elif g["weight"].ndim == 4:
            kind = "conv"
        else:
            kind = "dense" if "bias" in g else "embed"
        out.append((prefix, kind, g))
    return out
