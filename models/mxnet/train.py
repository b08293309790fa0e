"""``python -m models.mxnet.train --arch lenet5 --data mnist.npz --profile quick --seed 0 --out DIR``:
train one study model in MXNet Gluon (hybridized), evaluate it in MXNet, export it with MXNet's own ONNX
exporter (``mx.onnx.export_model``, dynamic batch) to ``DIR/model.onnx``.

Runs in MXNet's own environment (``portability setup mxnet``) with ``PYTHONPATH`` at the repository
root. Contract and outputs: ``models.common``; also ``DIR/eval_logits.npy`` (MXNet's logits on
``eval.npz``'s samples) and ``DIR/mxnet/model-symbol.json`` + ``model-0000.params`` (``HybridBlock.export``,
what the ONNX exporter reads). The exported ONNX is checked with onnx's checker and run with ONNX Runtime
in the same environment against MXNet's logits (``export.max_abs_vs_framework``)."""
from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path

import numpy as np

from models import common, spec
from models.mxnet import import_mxnet

mx = import_mxnet(threads=2)
from mxnet import autograd, gluon  # noqa: E402

FRAMEWORK = "mxnet"
EVAL_BATCH = 500
#: mx2onnx's newest operator translations are opset 13's, but export_model (no opset argument) stamps
#: the model with onnx's newest opset (23 on onnx 1.18), under which some of its nodes are invalid (an
#: LSTM's Split without ``num_outputs``, opset 18); the export declares the opset its nodes follow.
OPSET = 13
CTX = mx.cpu()


def configure(seed: int) -> None:
    mx.random.seed(seed)
    np.random.seed(seed)


def to_input(x: np.ndarray) -> np.ndarray:
    """The model's own input layout and dtype: images ``[N, 1, 28, 28]`` float32, token ids float32
    ``[N, L]`` (MXNet's Embedding takes float ids; exact below 2**24)."""
    return common.image_layout(x, channels_last=False) if x.ndim == 3 else x.astype(np.float32)


def classes_of(args, data: dict) -> int:
    known = spec.DATASETS.get(args.dataset, {}).get("classes")
    return int(known or max(int(data["y_train"].max()), int(data["y_test"].max())) + 1)


def build(arch: str, classes: int) -> gluon.HybridBlock:
    net = importlib.import_module(f"models.mxnet.{arch}").build(spec.ARCHS[arch], classes)
    net.initialize(ctx=CTX)  # each parameter's own initializer (layers.py): the spec's family
    net.hybridize()
    return net


def trainer(net: gluon.HybridBlock, arch: str) -> gluon.Trainer:
    return gluon.Trainer(net.collect_params(), "adam", {"learning_rate": spec.ARCHS[arch]["lr"], "beta1": 0.9,
                                                        "beta2": 0.999, "epsilon": 1e-7, "wd": 0.0})


def make_step(net, tr: gluon.Trainer, x: np.ndarray, y: np.ndarray):
    """``step(idx, lr) -> loss``: one optimizer step on those training samples (mean softmax cross-entropy
    on the logits; BatchNorm in training mode inside ``autograd.record``)."""
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step(idx, lr):
        tr.set_learning_rate(lr)
        xb = mx.nd.array(x[idx], ctx=CTX, dtype=np.float32)
        yb = mx.nd.array(y[idx], ctx=CTX, dtype=np.float32)
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        tr.step(len(idx))  # gradients of the summed loss, rescaled by 1/batch: the mean
        return float(loss.mean().asscalar())

    return step


def predict(net, x: np.ndarray, batch: int = EVAL_BATCH) -> np.ndarray:
    """Logits in inference mode (outside ``autograd.record``: BatchNorm uses its moving averages)."""
    if not len(x):
        return np.zeros((0, 0), np.float32)
    return np.concatenate([net(mx.nd.array(x[i: i + batch], ctx=CTX, dtype=np.float32)).asnumpy()
                           for i in range(0, len(x), batch)])


@contextlib.contextmanager
def _onnx_opset(version: int):
    """``onnx.defs.onnx_opset_version()`` answers ``version`` meanwhile: what mx2onnx picks its
    translations by and ``onnx.helper.make_model`` stamps the model with."""
    import onnx.defs

    saved = onnx.defs.onnx_opset_version
    onnx.defs.onnx_opset_version = lambda: version
    try:
        yield
    finally:
        onnx.defs.onnx_opset_version = saved


def tidy(model, classes: int | None = None):
    """What mx2onnx leaves untidy, fixed without touching a node: its IR version (onnx 1.18's
    ``make_model`` writes 11 whatever the opset; the lowest for the model's opset keeps it loadable by
    ONNX Runtime < 1.22), the weights it also lists as graph inputs (overridable inputs to a runtime, which
    blocks constant folding and shows as extra model inputs), and the unnamed dynamic batch dimension
    (named ``batch`` on the input and the output; the output's class dimension set)."""
    import onnx

    model.ir_version = onnx.helper.find_min_ir_version_for(list(model.opset_import))
    weights = {i.name for i in model.graph.initializer}
    keep = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    for v in list(model.graph.input) + list(model.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims and not dims[0].dim_param and not dims[0].dim_value:
            dims[0].dim_param = "batch"
    for v in model.graph.output:
        dims = v.type.tensor_type.shape.dim
        if classes and len(dims) == 2 and not dims[1].dim_param and not dims[1].dim_value:
            dims[1].dim_value = classes
    return model


def export(net, x_eval: np.ndarray, logits: np.ndarray, out: Path):
    """``HybridBlock.export`` → ``mx.onnx.export_model`` (dynamic batch) → ``out/model.onnx``; checked
    with onnx's checker and run with ONNX Runtime on the eval samples against MXNet's logits."""
    import onnx

    native = out / "mxnet"
    native.mkdir(parents=True, exist_ok=True)
    net.export(str(native / "model"), epoch=0)  # returns nothing in 1.9.1
    sym_file, params_file = str(native / "model-symbol.json"), str(native / "model-0000.params")
    sample = tuple(x_eval.shape[1:])
    onnx_file = out / "model.onnx"
    onnx_file.unlink(missing_ok=True)
    with _onnx_opset(OPSET):
        mx.onnx.export_model(sym_file, params_file, in_shapes=[(1, *sample)], in_types=[np.float32],
                             onnx_file_path=str(onnx_file), dynamic=True, dynamic_input_shapes=[(None, *sample)])
    model = tidy(onnx.load(str(onnx_file)), classes=int(logits.shape[1]) if logits.ndim == 2 else None)
    onnx.save(model, str(onnx_file))
    onnx.checker.check_model(model, full_check=True)
    inputs = [i.name for i in model.graph.input]
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None)
    extra = {"input": inputs[0], "opset": opset, "dynamic_batch": True,
             "native": [str(Path(sym_file).relative_to(out)), str(Path(params_file).relative_to(out))]}
    try:
        import onnxruntime as ort
    except ImportError:  # verified in the main environment instead
        return "model.onnx", {**extra, "max_abs_vs_framework": None}
    sess = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    got = np.concatenate([sess.run(None, {inputs[0]: x_eval[i: i + EVAL_BATCH]})[0]
                          for i in range(0, len(x_eval), EVAL_BATCH)]) if len(x_eval) else logits
    if got.shape != logits.shape:
        raise RuntimeError(f"the exported model's output {got.shape} differs from MXNet's {logits.shape}")
    diff = float(np.max(np.abs(got - logits))) if got.size else 0.0
    return "model.onnx", {**extra, "max_abs_vs_framework": diff, "onnxruntime": ort.__version__}


def transplant(net, weights: dict) -> None:
    """Load PyTorch's trained weights (``models.common.weight_groups``) into this MXNet network: Gluon
    keeps PyTorch's layouts (conv ``[O, I, kh, kw]``, dense ``[out, in]``, channels-first flattening, LSTM
    ``[4H, in]`` with gates i, f, g, o and two bias vectors, batch norm γ, β, running mean and variance) and
    registers its parameters in the same order as PyTorch's ``state_dict``: copied one to one, each shape
    checked."""
    params = list(net.collect_params().values())
    arrays = list(weights.items())
    if len(params) != len(arrays):
        raise ValueError(f"MXNet's network has {len(params)} parameters, PyTorch's weights {len(arrays)}")
    for p, (name, w) in zip(params, arrays):
        if tuple(p.shape) != w.shape:
            raise ValueError(f"PyTorch's {name} {w.shape} does not fit MXNet's {p.name} {tuple(p.shape)}")
        p.set_data(mx.nd.array(w, ctx=CTX, dtype=np.float32))


def main(argv=None) -> int:
    args = common.parse(argv)
    configure(args.seed)
    data = common.load(args)
    task = common.check_task(args, data)
    x_train, x_eval, x_test = (to_input(data[k]) for k in ("x_train", "x_eval", "x_test"))
    net = build(args.arch, classes_of(args, data))
    if args.weights_from:
        transplant(net, common.read_weights(args.weights_from))
    step = make_step(net, trainer(net, args.arch), x_train, data["y_train"])
    fitted = common.fit(args, data, net, step, predict, export, x_eval, x_test)
    exp = fitted["export"]
    common.write_meta(
        args, framework=FRAMEWORK, version=mx.__version__, data=data,
        params=sum(int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null"),
        input_spec={"name": exp.get("input", "data"), "shape": [None, *x_eval.shape[1:]], "dtype": str(x_eval.dtype),
                    "layout": "NCHW" if task == "image" else "NL", **({"ids": "float32 token ids"} if task == "text" else {})},
        eval_x=x_eval, **fitted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
