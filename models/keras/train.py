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


def main(argv=None) -> int:
    args = common.parse(argv)
    keras = configure(args.seed)
    data = common.load(args)
    task = common.check_task(args, data)
    x_train, x_eval, x_test = (to_input(data[k]) for k in ("x_train", "x_eval", "x_test"))
    model = build(args.arch, classes_of(args, data))
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
