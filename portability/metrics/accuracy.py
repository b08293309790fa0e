"""Task accuracy on a labelled dataset: top-1 of the first class-score output against the labels."""
from __future__ import annotations

import numpy as np

from portability.metrics.drift import looks_like_scores, top1


def score_output(outputs: dict[str, np.ndarray]) -> str | None:
    """The first output that looks like class scores ([batch, classes] floats)."""
    return next((n for n, a in outputs.items() if looks_like_scores(a)), None)


def accuracy(outputs: dict[str, np.ndarray], labels: np.ndarray | None, name: str | None) -> float | None:
    if labels is None or name is None or name not in outputs:
        return None
    pred = top1(outputs[name])
    y = labels.reshape(-1)
    if pred.size != y.size:
        return None
    return float(np.mean(pred == y))
