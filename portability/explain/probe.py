"""One cut of a model checked on a target (``localize``): its tensors' drift against the reference's; the model
read and one session for all the checks a search makes (``opened``: ``localize``'s cuts, ``fix``, ``rescue``)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from portability.core.status import Status


@dataclass
class Probe:
    """One cut checked on the target: its tensors' drift, the cut's status and error."""

    index: int
    status: Status
    error: str | None = None
    tensors: dict[str, dict] = field(default_factory=dict)

    @property
    def bad(self) -> bool:
        return any(t["diverges"] for t in self.tensors.values())

    @property
    def constant(self) -> bool:
        return any(t.get("constant") for t in self.tensors.values())


def tensor_drift(ref: Any, got: Any, bounds: dict) -> dict:
    """One tensor on the target against the reference (see the module doc)."""
    from portability.metrics import drift
    from portability.metrics.bounds import DIVERGENCE, bound

    r = np.concatenate([np.ravel(x) for x in ref]) if isinstance(ref, list) else np.asarray(ref)
    g = np.concatenate([np.ravel(x) for x in got]) if isinstance(got, list) else np.asarray(got)
    if r.size != g.size:
        return {"diverges": True, "problem": f"{g.size} values, the reference {r.size}"}
    j = drift.judge(bounds, {"": r.reshape(-1)}, {"": g.reshape(-1)}, rule=DIVERGENCE)
    d, cmin, limit = j.outputs[""], bounds.get("cosine"), bound(bounds, j.outputs[""], DIVERGENCE)
    ratios = [d["max_abs"] / limit] if limit else []
    ratios += [(1.0 - d["cosine"]) / (1.0 - cmin)] if cmin is not None and cmin < 1 and r.size > 1 else []
    out = {"max_abs": d["max_abs"], "cosine": d["cosine"], "scale": d["ref_max_abs"], "diverges": bool(j.breaches),
           "ratio": max(ratios) if ratios else None}
    if not isinstance(ref, list) and r.ndim >= 1 and r.shape[0] > 1:  # batches: does it still follow the input?
        rs, gs = (float(np.ptp(x.reshape(x.shape[0], -1).astype(np.float64), axis=0).max()) for x in (r, g.reshape(r.shape)))
        if rs > 0 and gs == 0:
            out["constant"] = True
    return out


@contextmanager
def opened(model_path: Path, opts) -> Iterator[tuple[Any, Any]]:
    """The model read (in the sandbox) and one session for every check a search makes: ``(info, session)``."""
    from portability.engine.pipeline import load_source_isolated
    from portability.engine.session import Session

    info = load_source_isolated(model_path, sandbox=opts.sandbox, shapes=opts.shapes)
    with Session(mode=opts.sandbox, reads=(str(Path(model_path).resolve().parent),)) as session:
        yield info, session
