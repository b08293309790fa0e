"""Perturbed inputs for the robustness pass: seeded families of perturbations around each sample.

Pure numpy. The set is built once per check from the first rows of its inputs and is the same for every
target (each target runs it after its clean batches, in the same worker call). Every family has levels
given as a fraction of the input's value range (floats) or of the positions substituted (integer ids):

- ``gaussian``: additive N(0, (level·range)²) noise, clipped to the range;
- ``uniform``: additive U(-level·range, +level·range) noise, clipped;
- ``brightness`` (image-like inputs: float, 3 or more dims): ± level·range added to the whole sample,
  the sign drawn per sample;
- ``contrast`` (image-like): the sample scaled about its mean by 1 ± level, the sign drawn per sample;
- ``substitution`` (integer inputs of 2 or more dims, e.g. token ids): a fraction ``level`` of the
  positions replaced by random ids inside the valid id range.

Adversarial groups (``fgsm``, ``pgd``; ``metrics.robustness.adversarial``) are appended to the same set by the check.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DEFAULT_SAMPLES = 64

#: family -> levels (see the module docstring for their unit)
LEVELS: dict[str, tuple[float, ...]] = {
    "gaussian": (0.01, 0.03, 0.1, 0.3),
    "uniform": (0.01, 0.03, 0.1, 0.3),
    "brightness": (0.05, 0.1, 0.2),
    "contrast": (0.05, 0.1, 0.2),
    "substitution": (0.05, 0.1, 0.2, 0.5),
}
UNITS = {
    "gaussian": "noise standard deviation, as a fraction of the input range",
    "uniform": "largest noise magnitude (±), as a fraction of the input range",
    "brightness": "shift (± per sample), as a fraction of the input range",
    "contrast": "contrast change: the sample scaled about its mean by 1 ± level (sign per sample)",
    "substitution": "fraction of integer ids replaced by random ids in the valid range",
    "fgsm": "L∞ budget ε, as a fraction of the input range (FGSM, one signed-gradient step)",
    "pgd": "L∞ budget ε, as a fraction of the input range (PGD)",
}


@dataclass(frozen=True)
class Group:
    """One perturbation at one level: ``batches`` consecutive batches of the set."""

    family: str
    level: float


@dataclass
class PerturbedSet:
    #: per input, ``[len(groups) * batches, *batch_shape]``: group after group, each ``batches`` batches
    arrays: dict[str, np.ndarray]
    groups: list[Group]
    #: batches per group (the first ``batches`` clean batches, perturbed)
    batches: int
    #: labels of those batches ``[batches, batch]``, or None without a dataset
    labels: np.ndarray | None
    seed: int
    #: per float input, the (low, high) range values are clipped to
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: per integer input, the ids drawn from [0, high)
    id_bounds: dict[str, int] = field(default_factory=dict)
    #: the clean batches the set perturbs (``[batches, *batch_shape]`` per input)
    clean: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        a = next(iter(self.arrays.values()))
        return self.batches * (a.shape[1] if a.ndim > 1 else 1)

    def add(self, family: str, level: float, arrays: dict[str, np.ndarray]) -> None:
        """Append a group (``batches`` batches per input, e.g. adversarial examples)."""
        self.groups.append(Group(family, float(level)))
        for k in self.arrays:
            self.arrays[k] = np.concatenate([self.arrays[k], arrays[k].astype(self.arrays[k].dtype)])

    def describe(self) -> dict:
        """The report's ``inputs.robustness``: what was perturbed, how, and with which levels."""
        fams: dict[str, list[float]] = {}
        for g in self.groups:
            fams.setdefault(g.family, []).append(g.level)
        return {"samples": self.samples, "seed": self.seed, "families": fams,
                "units": {f: UNITS[f] for f in fams if f in UNITS},
                "ranges": {k: [float(lo), float(hi)] for k, (lo, hi) in self.ranges.items()},
                "id_bounds": dict(self.id_bounds)}


def image_like(a: np.ndarray) -> bool:
    """Float batches of 3 or more dims per batch (``[N, H, W]``, ``[N, C, H, W]``, ``[N, H, W, C]``)."""
    return a.dtype.kind == "f" and a.ndim - 1 >= 3


def _substitutable(a: np.ndarray) -> bool:
    return a.dtype.kind in "iu" and a.ndim - 1 >= 2


def float_range(a: np.ndarray, declared: tuple[float, float]) -> tuple[float, float]:
    """The declared range, widened to the values actually present."""
    return min(declared[0], float(np.nanmin(a))), max(declared[1], float(np.nanmax(a)))


def rows(arrays: dict[str, np.ndarray], samples: int) -> int:
    """Batches holding the first ``samples`` rows (whole batches, at least one)."""
    a = next(iter(arrays.values()))
    per = a.shape[1] if a.ndim > 1 else 1
    return max(1, min(a.shape[0], -(-samples // max(per, 1))))


def build(arrays: dict[str, np.ndarray], labels: np.ndarray | None, samples: int = DEFAULT_SAMPLES, seed: int = 0,
          value_range: tuple[float, float] = (0.0, 1.0), index_bounds: dict[str, int] | None = None,
          levels: dict[str, tuple[float, ...]] | None = None) -> PerturbedSet:
    """The perturbed set around the first ``samples`` rows of the stacked feeds ``arrays``
    (``[n_batches, *batch_shape]`` per input). Deterministic for ``seed``; inputs of other kinds (bools,
    0-d or 1-d integers) are passed through unchanged."""
    levels = levels or LEVELS
    nb = rows(arrays, samples)
    clean = {k: np.asarray(v[:nb]) for k, v in arrays.items()}
    ranges = {k: float_range(v, value_range) for k, v in clean.items() if v.dtype.kind == "f" and v.size}
    bounds = {k: max(int((index_bounds or {}).get(k, 10)), int(v.max()) + 1) for k, v in clean.items()
              if _substitutable(v) and v.size}
    fams: list[str] = []
    if ranges:
        fams += ["gaussian", "uniform"]
    if any(image_like(clean[k]) for k in ranges):
        fams += ["brightness", "contrast"]
    if bounds:
        fams.append("substitution")
    groups: list[Group] = []
    parts: dict[str, list[np.ndarray]] = {k: [] for k in clean}
    for fi, fam in enumerate(fams):
        for li, level in enumerate(levels.get(fam, ())):
            # one generator per (family, level): adding a family or level never changes the others' values
            rng = np.random.default_rng([seed, fi, li])
            groups.append(Group(fam, float(level)))
            for ki, (k, x) in enumerate(clean.items()):
                # a sample's sign (brightness, contrast) is the same at every level: only the size grows
                signs = np.random.default_rng([seed, fi, 1000 + ki]).random(x.shape[:2] + (1,) * (x.ndim - 2)) < 0.5
                parts[k].append(_apply(fam, level, x, rng, ranges.get(k), bounds.get(k), signs))
    out = {k: (np.concatenate(v) if v else clean[k][:0]) for k, v in parts.items()}
    lab = None if labels is None else np.asarray(labels[:nb])
    return PerturbedSet(out, groups, nb, lab, seed, ranges, bounds, clean)


def _apply(fam: str, level: float, x: np.ndarray, rng: np.random.Generator, rng_range: tuple[float, float] | None,
           id_bound: int | None, negative: np.ndarray) -> np.ndarray:
    if fam == "substitution":
        if id_bound is None:
            return x.copy()
        mask = rng.random(x.shape) < level
        return np.where(mask, rng.integers(0, id_bound, x.shape), x).astype(x.dtype)
    if rng_range is None or (fam in ("brightness", "contrast") and not image_like(x)):
        return x.copy()
    lo, hi = rng_range
    scale = (hi - lo) * level
    xf = x.astype(np.float64)
    if fam == "gaussian":
        y = xf + rng.normal(0.0, scale, x.shape)
    elif fam == "uniform":
        y = xf + rng.uniform(-scale, scale, x.shape)
    else:
        sign = np.where(negative, -1.0, 1.0)  # one sign per row of each batch
        if fam == "brightness":
            y = xf + sign * scale
        else:  # contrast
            axes = tuple(range(2, x.ndim))
            mean = xf.mean(axis=axes, keepdims=True)
            y = mean + (1.0 + sign * level) * (xf - mean)
    return np.clip(y, lo, hi).astype(x.dtype)


__all__ = ["LEVELS", "UNITS", "Group", "PerturbedSet", "build", "image_like", "float_range", "rows", "DEFAULT_SAMPLES"]
