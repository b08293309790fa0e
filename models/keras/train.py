"""``python -m models.keras.train --arch lenet5 --data mnist.npz --profile quick --seed 0 --out DIR``:
train one study model in Keras 3 (TensorFlow backend unless ``KERAS_BACKEND`` says otherwise), evaluate it
in inference mode, save it to ``DIR/model.keras`` (reloaded in safe mode and checked). Contract and
outputs: ``models.common``; also ``DIR/eval_logits.npy``, the model's logits on ``eval.npz``'s samples."""
from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import importlib  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from models import common, spec  # noqa: E402

FRAMEWORK = "keras"
EVAL_BATCH = 500


def configure(seed: int, threads: int = 2):
    """Thread counts (before the backend starts), the seeds, deterministic ops; returns keras."""
    if os.environ["KERAS_BACKEND"] == "tensorflow":
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # the runtime already started in this process
            pass
        tf.config.experimental.enable_op_determinism()
    elif os.environ["KERAS_BACKEND"] == "torch":
        import torch

        torch.set_num_threads(threads)
    import keras

    keras.utils.set_random_seed(seed)
    return keras


def backend() -> str:
    import keras

    name = keras.backend.backend()
    mod = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax"}.get(name)
    try:
        return f"{name} {importlib.import_module(mod).__version__}" if mod else name
    except ImportError:
        return name


def to_input(x: np.ndarray) -> np.ndarray:
    """The model's own input layout and dtype: images ``[N, 28, 28, 1]`` float32, token ids int32."""
    return common.image_layout(x, channels_last=True) if x.ndim == 3 else x.astype(np.int32)


def classes_of(args, data: dict) -> int:
    known = spec.DATASETS.get(args.dataset, {}).get("classes")
    return int(known or max(int(data["y_train"].max()), int(data["y_test"].max())) + 1)


def build(arch: str, classes: int):
    """The model, compiled with the spec's Adam and cross-entropy on logits."""
    import keras

    model = importlib.import_module(f"models.keras.{arch}").build(spec.ARCHS[arch], classes)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=spec.ARCHS[arch]["lr"], beta_1=0.9, beta_2=0.999,
                                                  epsilon=1e-7),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    return model


def make_step(model, x: np.ndarray, y: np.ndarray):
    """``step(idx, lr) -> loss``: one optimizer step on those training samples (training mode)."""
    y = y.astype(np.int64)

    def step(idx, lr):
        model.optimizer.learning_rate.assign(lr)
        return float(np.asarray(model.train_on_batch(x[idx], y[idx])))

    return step


def predict(model, x: np.ndarray, batch: int = EVAL_BATCH) -> np.ndarray:
    """Logits in inference mode, in batches."""
    return np.asarray(model.predict(x, batch_size=batch, verbose=0))


def export(model, x_eval: np.ndarray, logits: np.ndarray, out: Path):
    """``out/model.keras``, reloaded in safe mode (no custom code) and checked against the model's logits."""
    import keras

    model.save(out / "model.keras")
    loaded = keras.saving.load_model(out / "model.keras", safe_mode=True, compile=False)
    got = predict(loaded, x_eval)
    diff = float(np.max(np.abs(got - logits))) if got.size else 0.0
    return "model.keras", {"input": model.inputs[0].name, "max_abs_vs_framework": diff, "backend": backend()}


def _creation(layer) -> int:
    """A layer's place among its kind in creation order (Keras names them ``conv2d``, ``conv2d_1``, …;
    the functional model lists them in graph order, which puts a shortcut before the block's second conv)."""
    tail = layer.name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def transplant(model, weights: dict) -> None:
    """Load PyTorch's trained weights (``models.common.weight_groups``) into this Keras model, layer by
    layer in creation order, layouts converted: conv kernels ``[O, I, kh, kw]`` → ``[kh, kw, I, O]``; dense
    ``[out, in]`` → ``[in, out]``, the first dense after ``Flatten`` with its inputs reordered from PyTorch's
    channels-first flattening (C, H, W) to Keras's (H, W, C); batch norm γ, β, moving mean and variance as
    they are; LSTM kernels transposed (both use gates i, f, g, o) and its two bias vectors summed (Keras has
    one). A shape that does not fit raises."""
    from models.common import weight_groups

    kinds = {"conv": "Conv2D", "dense": "Dense", "bn": "BatchNormalization", "embed": "Embedding", "lstm": "LSTM"}
    layers: dict[str, list] = {}
    for layer in model.layers:
        if layer.weights:
            layers.setdefault(type(layer).__name__, []).append(layer)
    for group in layers.values():
        group.sort(key=_creation)
    flatten = next((layer for layer in model.layers if type(layer).__name__ == "Flatten"), None)
    after_flatten = flatten is not None
    for prefix, kind, w in weight_groups(weights):
        if not layers.get(kinds[kind]):
            raise ValueError(f"PyTorch's {prefix} ({kind}) has no Keras layer left to go to")
        layer = layers[kinds[kind]].pop(0)
        if kind == "conv":
            values = [w["weight"].transpose(2, 3, 1, 0)] + ([w["bias"]] if "bias" in w else [])
        elif kind == "dense":
            k = w["weight"]
            if after_flatten:
                h, wd, c = flatten.input.shape[1:]
                k = k.reshape(len(k), c, h, wd).transpose(0, 2, 3, 1).reshape(len(k), -1)
                after_flatten = False
            values = [k.T, w["bias"]]
        elif kind == "bn":
            values = [w["weight"], w["bias"], w["running_mean"], w["running_var"]]
        elif kind == "embed":
            values = [w["weight"]]
        else:
            values = [w["weight_ih_l0"].T, w["weight_hh_l0"].T, w["bias_ih_l0"] + w["bias_hh_l0"]]
        layer.set_weights([np.ascontiguousarray(v) for v in values])
    left = [layer.name for group in layers.values() for layer in group]
    if left:
        raise ValueError(f"Keras layers without PyTorch weights: {', '.join(left)}")


def main(argv=None) -> int:
    args = common.parse(argv)
    keras = configure(args.seed)
    data = common.load(args)
    task = common.check_task(args, data)
    x_train, x_eval, x_test = (to_input(data[k]) for k in ("x_train", "x_eval", "x_test"))
    model = build(args.arch, classes_of(args, data))
    if args.weights_from:
        transplant(model, common.read_weights(args.weights_from))
    step = make_step(model, x_train, data["y_train"])
    fitted = common.fit(args, data, model, step, predict, export, x_eval, x_test)
    common.write_meta(
        args, framework=FRAMEWORK, version=keras.__version__, data=data,
        params=sum(int(np.prod(w.shape)) for w in model.trainable_weights),  # as torch's parameters()
        input_spec={"name": model.inputs[0].name, "shape": [None, *x_eval.shape[1:]], "dtype": str(x_eval.dtype),
                    "layout": "NHWC" if task == "image" else "NL"},
        eval_x=x_eval, **fitted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
