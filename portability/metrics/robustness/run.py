"""The robustness pass of a check (``--robustness``): the perturbed set, built once from the check's
inputs (``metrics.robustness.perturb``), plus adversarial examples crafted on a differentiable source
(``metrics.robustness.adversarial``). Every target runs the whole set after its clean batches, in the same worker
call (``Job.extra_feeds``); the metrics compare each target's predictions on it with the reference's
(``metrics.robustness``)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from portability.metrics.robustness import perturb
from portability.core.protocol import save_feeds

log = logging.getLogger(__name__)


@dataclass
class Robustness:
    set: perturb.PerturbedSet
    #: the report's ``adversarial`` facts: ``available`` (and why not)
    adversarial: dict
    file: Path

    def describe(self) -> dict:
        """The report's ``inputs.robustness``."""
        return {**self.set.describe(), "adversarial": self.adversarial}


def prepare(model, feeds, opts, workdir: Path) -> Robustness:
    from portability.metrics.robustness import adversarial

    ps = perturb.build(feeds.arrays, feeds.labels, opts.robustness_samples, opts.seed, opts.value_range,
                       model.index_bounds)
    adv = adversarial.craft(model, ps, sandbox=opts.sandbox)
    if not adv.get("available"):
        log.info("adversarial robustness not available: %s", adv.get("reason"))
    path = workdir / "extra_feeds.npz"
    save_feeds(ps.arrays, path, [i.name for i in model.inputs])
    return Robustness(ps, adv, path)
