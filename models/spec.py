"""The study's architectures, datasets and training profiles, framework-free (plain Python; imported by
every framework's definitions, MXNet's own environment included).

Every framework builds the same layers with the same shapes, initialization family and hyper-parameters
from these values, so differences between their results come from the frameworks, not the recipe:

- weights (conv/dense kernels, LSTM input and recurrent kernels): Glorot (Xavier) uniform; biases zero
  (the LSTM's forget-gate bias too); embeddings uniform in ±0.05; batch norm γ=1, β=0, ε=1e-5, moving
  averages updated with momentum 0.9 (PyTorch's ``momentum=0.1``);
- Adam (β1 0.9, β2 0.999, ε 1e-7) with the learning rate decayed to 0 on a cosine over the run, per step
  (``models.common.learning_rate``), cross-entropy on logits, no weight decay, no augmentation;
- the same sample order: every framework shuffles with :func:`models.common.epoch_order` (numpy, seeded);
- the models output logits (class scores); inputs are channels-first for PyTorch and MXNet, channels-last
  for Keras (each framework's own convention), token ids int32 (MXNet's embedding takes float32 ids).
"""
from __future__ import annotations

FRAMEWORKS = ("torch", "keras", "mxnet")

#: image archs: (out_channels, kernel, padding) per conv, each followed by ACT and a 2×2 pool
ARCHS: dict[str, dict] = {
    "lenet1": {
        "task": "image",
        "convs": [(4, 5, 0), (12, 5, 0)],
        "dense": [],  # hidden dense widths before the classifier
        "act": "relu", "pool": "max",
        "lr": 2e-3, "batch": 64,
        "about": "LeNet-1 (LeCun et al. 1989): conv 4@5×5 → pool → conv 12@5×5 → pool → dense 10",
    },
    "lenet5": {
        "task": "image",
        "convs": [(6, 5, 2), (16, 5, 0)],
        "dense": [120, 84],
        "act": "relu", "pool": "max",
        "lr": 2e-3, "batch": 32,
        "about": "LeNet-5 (LeCun et al. 1998): conv 6@5×5 (same) → pool → conv 16@5×5 → pool → 120 → 84 → 10",
    },
    "resnet20": {
        "task": "image",
        "stem": 16,                      # 3×3 conv, BN, ReLU
        "stages": [(16, 1), (32, 2), (64, 2)],  # (width, first stride); 3 basic blocks each
        "blocks": 3,
        # basic block: conv3×3-BN-ReLU-conv3×3-BN, + shortcut (1×1 conv stride s + BN when shape changes), ReLU
        "bn_eps": 1e-5, "bn_momentum": 0.9,
        "lr": 1e-3, "batch": 64,
        "about": "ResNet-20 (He et al. 2016, CIFAR variant): 3×3 stem 16 → 3 stages × 3 basic blocks "
                 "(16, 32, 64; stride 2 with 1×1 projection shortcuts) → global average pool → dense 10",
    },
    "lstm": {
        "task": "text",
        "embed": 64, "hidden": 64,       # one LSTM layer, the last step's hidden state → dense
        "lr": 2e-3, "batch": 32,
        "about": "LSTM text classifier: embedding 64 → LSTM 64 (last hidden state) → dense 2",
    },
}

#: the text datasets' tokenization (shared by every framework: ids are made once, in models/data.py)
TEXT = {"vocab": 5000, "length": 48, "pad": 0, "oov": 1}  # ids: 0 pad (left), 1 unknown, 2.. words by frequency

DATASETS: dict[str, dict] = {
    "mnist": {"task": "image", "classes": 10, "shape": (28, 28)},
    "fashion": {"task": "image", "classes": 10, "shape": (28, 28)},
    "rotten": {"task": "text", "classes": 2, "shape": (TEXT["length"],)},
}

#: each architecture's dataset when --datasets is not given
DEFAULT_DATASET = {"lenet1": "mnist", "lenet5": "mnist", "resnet20": "fashion", "lstm": "rotten"}

#: training budgets. ``train`` caps the training samples (None: the whole split), ``eval`` the held-out
#: samples every deployed target is evaluated on (the in-framework baseline uses the same ones).
PROFILES: dict[str, dict] = {
    "step": {"epochs": 1, "train": 64, "eval": 32, "max_batches": 1},  # tests: one optimizer step
    "quick": {"epochs": 1, "train": 3000, "eval": 200},
    "full": {
        "epochs": {"lenet1": 20, "lenet5": 20, "resnet20": 4, "lstm": 8},
        "train": {"resnet20": 20000},
        "eval": 500,
    },
}


def budget(profile: str, arch: str) -> dict:
    """The profile's numbers for one architecture: ``{"epochs", "train", "eval", "max_batches"}``."""
    p = PROFILES[profile]

    def pick(key, default=None):
        v = p.get(key, default)
        return v.get(arch, default) if isinstance(v, dict) else v

    return {"epochs": pick("epochs", 1), "train": pick("train"), "eval": pick("eval"),
            "max_batches": pick("max_batches")}


def pairs(archs=None, datasets=None) -> list[tuple[str, str]]:
    """(arch, dataset) pairs to study: each architecture on its default dataset, or on every given
    dataset of its task."""
    out = []
    for a in archs or ARCHS:
        if datasets:
            out += [(a, d) for d in datasets if DATASETS[d]["task"] == ARCHS[a]["task"]]
        else:
            out.append((a, DEFAULT_DATASET[a]))
    return out
