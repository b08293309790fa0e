"""The check's second stage, after the plan: what every target's job reads, made once in the run's folder —
the feeds file, the calibration data, the robustness pass's perturbed (and adversarial) inputs — and the
static shapes converters get. Nothing here starts a process that runs a target."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from portability.core import inputs as inp
from portability.core.model import ModelInfo
from portability.core.protocol import save_feeds
from portability.settings.options import CheckOptions


@dataclass(frozen=True)
class Prepared:
    """What the check's jobs share (paths in the run's folder, which every worker may read)."""

    workdir: Path
    #: the feeds every target runs on, in the workers' file format
    feeds_file: Path
    #: the input names, in the model's order
    in_names: tuple[str, ...]
    #: the static shape of every input with a dynamic dimension, as the feeds have it (or as
    #: ``opts.convert_shapes`` gives it): what converters get
    input_shapes: dict[str, list[int]]
    #: the user's calibration data for quantizing converters ("" without)
    calibration: str
    #: the robustness pass (``metrics.robustness.run.Robustness``), with ``--robustness``
    robustness: Any = None
    #: ``--generate``: ``{"steps": N, "prompt": [token ids]}`` (empty without)
    generation: dict = field(default_factory=dict)

    @property
    def check_id(self) -> str:
        """Unique per check (the run's folder is a fresh temporary one)."""
        return self.workdir.name


def prepare(model: ModelInfo, feeds: inp.Feeds, opts: CheckOptions, workdir: Path) -> Prepared:
    """Write the feeds (and calibration data), craft the robustness pass's inputs where asked."""
    in_names = tuple(i.name for i in model.inputs)
    conv = getattr(opts, "convert_shapes", None) or {}
    shapes = {s.name: [int(d) for d in conv.get(s.name, feeds.arrays[s.name].shape[1:])]
              for s in model.inputs if any(not isinstance(d, int) for d in s.shape)}
    feeds_file = workdir / "feeds.npz"
    save_feeds(feeds.arrays, feeds_file, in_names)
    calibration = ""
    if getattr(opts, "calibration_feeds", None):
        with np.load(opts.calibration_feeds, allow_pickle=False) as z:
            given = {str(n): z[f"arr_{i}"] for i, n in enumerate(z["names"])}
        save_feeds(given, workdir / "calibration.npz", in_names)
        calibration = str(workdir / "calibration.npz")
    rob = None
    if opts.robustness:
        from portability.metrics.robustness import run as robust

        rob = robust.prepare(model, feeds, opts, workdir)
    return Prepared(workdir, feeds_file, in_names, shapes, calibration, rob, generation(model, opts))


def generation(model: ModelInfo, opts: CheckOptions) -> dict:
    """``--generate``'s steps and prompt, checked against the model: a decoder's, ids inside its vocabulary."""
    if not getattr(opts, "generate", 0):
        return {}
    from portability.core import decoder
    from portability.core.errors import UsageError
    from portability.core.generate import default_prompt

    lay = decoder.layout(model)
    if lay is None:
        raise UsageError("--generate needs a causal language model's decoder: input_ids with past key/value inputs "
                         "(past_key_values.N.key/value) or present outputs, as Optimum exports them")
    vocab = model.index_bounds.get(lay.ids)
    prompt = list(opts.prompt_ids) or default_prompt(vocab, seed=opts.seed)
    if vocab and max(prompt) >= vocab:
        raise UsageError(f"--prompt-ids: token {max(prompt)} is outside the vocabulary (0..{vocab - 1})")
    return {"steps": int(opts.generate), "prompt": prompt}
