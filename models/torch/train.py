"""``python -m models.torch.train --arch lenet5 --data mnist.npz --profile quick --seed 0 --out DIR``:
train one study model in PyTorch, evaluate it in eager mode, export it with ``torch.export`` (dynamic
batch) to ``DIR/model.pt2``. Contract and outputs: ``models.common``; also ``DIR/eval_logits.npy``, the
eager model's logits on ``eval.npz``'s samples, and ``DIR/weights.npz``, the trained weights (``save_weights``)."""
from __future__ import annotations

import os

# OpenMP workers that spin while they wait make 2 threads several times slower than 1 whenever the
# 2 cores are shared (measured: ResNet-20 steps 1-2.5 s instead of 0.25 s); passive waiting keeps the
# idle-machine speed. Read when torch's OpenMP runtime loads: before the import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import importlib  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import common, spec  # noqa: E402

FRAMEWORK = "torch"
EVAL_BATCH = 500
MAX_BATCH = 1024  # the exported program's batch dimension: 1 … MAX_BATCH


def configure(seed: int, threads: int = 2) -> None:
    """Seeded and deterministic (cheap on CPU); the study trains one model at a time."""
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


def to_input(x: np.ndarray) -> np.ndarray:
    """The model's own input layout and dtype: images ``[N, 1, 28, 28]`` float32, token ids int32."""
    return common.image_layout(x, channels_last=False) if x.ndim == 3 else x.astype(np.int32)


def classes_of(args, data: dict) -> int:
    known = spec.DATASETS.get(args.dataset, {}).get("classes")
    return int(known or max(int(data["y_train"].max()), int(data["y_test"].max())) + 1)


def build(arch: str, classes: int) -> torch.nn.Module:
    return importlib.import_module(f"models.torch.{arch}").build(spec.ARCHS[arch], classes)


def optimizer(model: torch.nn.Module, arch: str) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=spec.ARCHS[arch]["lr"], betas=(0.9, 0.999), eps=1e-7)


def make_step(model, opt, x: np.ndarray, y: np.ndarray):
    """``step(idx, lr) -> loss``: one optimizer step on those training samples (model in training mode)."""
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    def step(idx, lr):
        i = torch.from_numpy(np.asarray(idx, dtype=np.int64))
        for group in opt.param_groups:
            group["lr"] = lr
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xt[i]), yt[i])
        loss.backward()
        opt.step()
        return loss.item()

    return step


def predict(model, x: np.ndarray, batch: int = EVAL_BATCH) -> np.ndarray:
    """Logits in eval mode, in batches."""
    model.eval()
    with torch.no_grad():
        return np.concatenate([model(torch.from_numpy(x[i: i + batch])).numpy() for i in range(0, len(x), batch)]) \
            if len(x) else np.zeros((0, 0), np.float32)


def export(model, x_eval: np.ndarray, eager_logits: np.ndarray, out: Path):
    """``torch.export`` with a dynamic batch, saved to ``out/model.pt2``; the reloaded program is checked
    against the eager logits."""
    model.eval()
    example = torch.from_numpy(x_eval[:2])
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    with warnings.catch_warnings():  # nn.LSTM's flat weight list is reassigned while tracing: harmless
        warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights")
        ep = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
    torch.export.save(ep, out / "model.pt2")
    loaded = torch.export.load(out / "model.pt2").module()
    with torch.no_grad():
        got = np.concatenate([loaded(torch.from_numpy(x_eval[i: i + EVAL_BATCH])).numpy()
                              for i in range(0, len(x_eval), EVAL_BATCH)])
    inputs = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    diff = float(np.max(np.abs(got - eager_logits))) if got.size else 0.0
    return "model.pt2", {"input": inputs[0], "max_abs_vs_framework": diff, "dynamic_batch": [1, MAX_BATCH]}


def save_weights(model, path: Path) -> None:
    """The trained weights under their ``state_dict`` names, in module order (BatchNorm's step counter
    left out): what ``--weights-from`` loads into the other frameworks (``models.common.weight_groups``)."""
    np.savez(path, **{k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()
                      if not k.endswith("num_batches_tracked")})


def main(argv=None) -> int:
    args = common.parse(argv)
    configure(args.seed)
    data = common.load(args)
    task = common.check_task(args, data)
    x_train, x_eval, x_test = (to_input(data[k]) for k in ("x_train", "x_eval", "x_test"))
    model = build(args.arch, classes_of(args, data))
    step = make_step(model, optimizer(model, args.arch), x_train, data["y_train"])
    if args.weights_from:
        raise SystemExit("--weights-from loads PyTorch's weights into Keras or MXNet; PyTorch trains its own")
    fitted = common.fit(args, data, model, step, predict, export, x_eval, x_test)
    save_weights(model, args.out / "weights.npz")
    exp = fitted["export"]
    name = exp.get("input", "x")
    common.write_meta(
        args, framework=FRAMEWORK, version=torch.__version__, data=data,
        params=sum(p.numel() for p in model.parameters()),
        input_spec={"name": name, "shape": [None, *x_eval.shape[1:]], "dtype": str(x_eval.dtype),
                    "layout": "NCHW" if task == "image" else "NL"},
        eval_x=x_eval, **fitted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
