"""Adversarial examples crafted on the source model (FGSM and PGD, L∞), for the robustness pass.

Only a differentiable source has gradients: a PyTorch ``torch.export`` program (``.pt2``) or a Keras 3
``.keras`` model. The crafting runs in a child process (``python -m portability.metrics.robustness.adversarial
JOB.json``) so that torch / TensorFlow never load into the check's process; the child writes the examples
to an ``.npz`` the check appends to the perturbed set, one group per attack and ε, so that every target
runs exactly the same adversarial inputs.

Loss: cross-entropy of the source's class scores (log-softmax of logits; the log of probabilities when the
scores already are a softmax) against the true labels, or, without labels, against the source's own
prediction on the clean input. ε is a fraction of each input's value range; PGD takes ``PGD_STEPS``
steps of ε/4 from a seeded random start inside the ε-ball, projected back onto the ball and the range.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

EPSILONS = (0.01, 0.03, 0.1)
PGD_STEPS = 10


def differentiable() -> dict[str, str]:
    """Source kinds whose module has a gradient adapter (``Gradients``), and the framework each needs
    (its ``GRADIENTS``)."""
    from importlib import import_module

    from portability.sources import SOURCES

    return {kind: m.GRADIENTS for kind, path in SOURCES.items() if hasattr(m := import_module(path), "Gradients")}


def unavailable(reason: str) -> dict:
    return {"available": False, "reason": reason}


def why_not(model) -> str | None:
    """Why no adversarial examples can be crafted for this source (None: they can)."""
    from importlib.util import find_spec

    fmt = model.format
    can = differentiable()
    if fmt not in can:
        return (f"no differentiable source: adversarial examples are crafted on a PyTorch (.pt2) or Keras (.keras) "
                f"source model, and this model is {'an ONNX' if fmt == 'onnx' else 'a ' + fmt} file (gradients of a "
                "converted graph are not computed here)")
    if find_spec(can[fmt]) is None:
        return f"crafting needs {can[fmt]}, which is not installed here"
    if not any(np.dtype(i.dtype).kind == "f" for i in model.inputs if _known(i.dtype)):
        return "the model has no float input to perturb along a gradient"
    return None


def _known(dtype: str) -> bool:
    try:
        np.dtype(dtype)
        return True
    except TypeError:
        return False


def craft(model, ps, epsilons=EPSILONS, steps: int = PGD_STEPS, timeout_s: float = 600, sandbox: str | None = None) -> dict:
    """Craft FGSM and PGD examples on ``model`` (a ``ModelInfo``) around the clean rows of the perturbed set
    ``ps`` and append them to it; returns the report's ``adversarial`` facts (``available`` and why not).
    The crafting child runs in the OS sandbox: it reads the model's folder and writes only its own."""
    from portability.core import sandbox as sbx
    from portability.sources import model_folder

    reason = why_not(model)
    if reason:
        return unavailable(reason)
    names = [i.name for i in model.inputs]
    with tempfile.TemporaryDirectory(prefix="portability-adv-") as d:
        d = Path(d)
        clean = {n: ps.clean[n] for n in names}
        np.savez(d / "clean.npz", **{f"in{i}": clean[n] for i, n in enumerate(names)},
                 **({"labels": ps.labels} if ps.labels is not None else {}))
        job = {"kind": model.format, "path": str(model.path), "inputs": names, "epsilons": list(epsilons),
               "steps": steps, "seed": ps.seed, "ranges": {k: list(v) for k, v in ps.ranges.items()},
               "clean": str(d / "clean.npz"), "out": str(d / "adv.npz"),
               # every input's leading dimension is free: the batches can be crafted as one
               "batchable": all(i.shape and not isinstance(i.shape[0], int) for i in model.inputs)}
        (d / "job.json").write_text(json.dumps(job))
        (d / "tmp").mkdir()
        env = sbx.private_env(dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="-1"), d / "tmp")
        sb = sbx.Sandbox(mode=sandbox or sbx.default_mode(), read=(str(model_folder(model.path)),), write=(str(d),))
        try:
            p = subprocess.run(sbx.command(sb, [sys.executable, "-m", "portability.metrics.robustness.adversarial", str(d / "job.json")]),
                               capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, env=env,
                               cwd=d)
        except subprocess.TimeoutExpired:
            return unavailable(f"crafting took longer than {timeout_s:g} s")
        try:
            answer = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
            return unavailable(f"crafting failed: {tail}")
        if "error" in answer:
            return unavailable(answer["error"])
        with np.load(d / "adv.npz", allow_pickle=False) as z:
            for attack in ("fgsm", "pgd"):
                for k, eps in enumerate(epsilons):
                    ps.add(attack, eps, {n: z[f"{attack}.{k}.in{i}"] for i, n in enumerate(names)})
    return {"available": True, "crafted_on": f"the {model.format} source ({answer['framework']})",
            "attacks_run": ["fgsm", "pgd"], "epsilons": list(epsilons), "pgd_steps": steps, "pgd_step": "epsilon/4",
            "loss": answer["loss"], "labels": "true labels" if ps.labels is not None else "the source's clean predictions",
            "source_clean_accuracy": answer.get("clean_accuracy")}


# -- the child ---------------------------------------------------------------------------------------------

def _looks_like_probs(s: np.ndarray) -> bool:
    s = s.reshape(-1, s.shape[-1]).astype(np.float64)
    return bool(np.all(s >= -1e-6) and np.all(s <= 1 + 1e-6) and np.allclose(s.sum(-1), 1.0, atol=1e-3))


def _step(x: np.ndarray, g: np.ndarray | None, x0: np.ndarray, size: float, eps: float, rng_: tuple) -> np.ndarray:
    if g is None:
        return x
    lo, hi = rng_
    y = x.astype(np.float64) + size * np.sign(g)
    y = np.clip(y, x0 - eps, x0 + eps)
    return np.clip(y, lo, hi).astype(x.dtype)


def _attack(fw, batch: list[np.ndarray], y: np.ndarray, out_idx: int, probs: bool, eps_frac: float, steps: int,
            ranges: list, rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(FGSM, PGD) examples of one batch at one ε."""
    eps = [(r[1] - r[0]) * eps_frac if r else 0.0 for r in ranges]
    g = fw.grads(batch, y, out_idx, probs)
    fgsm = [_step(x, gi, x, e, e, r) if r else x for x, gi, e, r in zip(batch, g, eps, ranges)]
    adv = [np.clip(x + rng.uniform(-e, e, x.shape), r[0], r[1]).astype(x.dtype) if r else x
           for x, e, r in zip(batch, eps, ranges)]
    for _ in range(steps):
        g = fw.grads(adv, y, out_idx, probs)
        adv = [_step(a, gi, x, e / 4, e, r) if r else a for a, gi, x, e, r in zip(adv, g, batch, eps, ranges)]
    return fgsm, adv


def run(job: dict) -> dict:
    from importlib import import_module

    from portability.sources import SOURCES

    fw = import_module(SOURCES[job["kind"]]).Gradients(job["path"])
    names = job["inputs"]
    with np.load(job["clean"], allow_pickle=False) as z:
        clean = [z[f"in{i}"] for i in range(len(names))]
        labels = z["labels"] if "labels" in z.files else None
    nb = clean[0].shape[0]
    if job.get("batchable") and nb > 1:  # one call over every sample: far fewer framework calls
        shapes = [c.shape for c in clean]
        clean = [c.reshape((1, -1) + c.shape[2:]) for c in clean]
        labels = labels.reshape(1, -1) if labels is not None else None
        answer = _run(fw, job, names, clean, labels)
        if "error" in answer:
            return answer
        with np.load(job["out"], allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        np.savez(job["out"], **{k: v.reshape(shapes[int(k.rsplit("in", 1)[1])]) for k, v in arrays.items()})
        return answer
    return _run(fw, job, names, clean, labels)


def _run(fw, job: dict, names: list[str], clean: list[np.ndarray], labels: np.ndarray | None) -> dict:
    ranges = [job["ranges"].get(n) if clean[i].dtype.kind == "f" else None for i, n in enumerate(names)]
    nb = clean[0].shape[0]
    first = fw.scores([c[0] for c in clean], None)
    out_idx = next((j for j, s in enumerate(first) if s.dtype.kind == "f" and s.ndim >= 1 and s.shape[-1] > 1), None)
    if out_idx is None:
        return {"error": "the source model has no output that looks like class scores"}
    probs = _looks_like_probs(first[out_idx])
    rng = np.random.default_rng([int(job["seed"]), 7])
    eps_list = job["epsilons"]
    out: dict[str, list[list[np.ndarray]]] = {f"{a}.{k}.in{i}": [] for a in ("fgsm", "pgd")
                                               for k in range(len(eps_list)) for i in range(len(names))}
    correct = 0
    total = 0
    for b in range(nb):
        batch = [c[b] for c in clean]
        pred = np.argmax(fw.scores(batch, out_idx)[out_idx].reshape(-1, first[out_idx].shape[-1]), -1)
        y = labels[b].reshape(-1) if labels is not None else pred
        correct += int(np.sum(pred == y))
        total += y.size
        for k, e in enumerate(eps_list):
            fgsm, pgd = _attack(fw, batch, y, out_idx, probs, e, int(job["steps"]), ranges, rng)
            for i in range(len(names)):
                out[f"fgsm.{k}.in{i}"].append(fgsm[i])
                out[f"pgd.{k}.in{i}"].append(pgd[i])
    np.savez(job["out"], **{k: np.stack(v) for k, v in out.items()})
    return {"framework": fw.framework, "loss": "nll of the softmax scores" if probs else "cross-entropy of the logits",
            "clean_accuracy": round(correct / total, 6) if labels is not None and total else None}


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    events = os.dup(1)
    os.dup2(2, 1)  # framework chatter goes to stderr; the answer is the last line of the real stdout
    try:
        answer = run(job)
    except Exception as e:  # noqa: BLE001 — any failure is the answer, one line
        msg = (str(e).strip().splitlines() or [""])[0]
        answer = {"error": f"crafting failed: {type(e).__name__}: {msg}"[:400]}
    os.write(events, (json.dumps(answer) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
