"""Greedy decoding with the key/value cache, one token per step, over any runtime's one inference (``step``):
prefill with the prompt, then each step feeds the last token, the cache the step before returned (its
``present.N.*`` become ``past_key_values.N.*``: ``Layout.presents``), a mask over past + 1 and the next position.

Run free (each step's own argmax fed back: the tokens a user gets) or teacher-forced (each step fed the
reference's token: the logits' drift measured without compounding). A decoder without past inputs is run
without a cache: the whole sequence each step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from portability.core.decoder import PAST_AXIS, Layout
from portability.core.errors import BadInput, RunError
from portability.core.model import TensorSpec

Step = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]

#: the output that carries the next token's scores
LOGITS = "logits"


@dataclass
class Decoded:
    """One loop's tokens (prompt excluded), each step's last-position logits, and its timings (ms)."""

    tokens: list[int] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)

    @property
    def ttft_ms(self) -> float | None:
        """Time to the first token: the prefill step."""
        return self.step_ms[0] if self.step_ms else None

    @property
    def tokens_per_s(self) -> float | None:
        """Decode speed: the median step after the prefill."""
        rest = self.step_ms[1:]
        return 1e3 / float(np.median(rest)) if rest and np.median(rest) > 0 else None


def _empty_past(spec: TensorSpec, batch: int) -> np.ndarray:
    """A past of length 0 (``[batch, heads, 0, head dim]``): the heads and head size must be fixed."""
    dims = list(spec.shape)
    if not all(isinstance(d, int) for i, d in enumerate(dims) if i not in (0, PAST_AXIS)):
        raise BadInput(f"input '{spec.name}' has dynamic heads or head size {dims}: fix them with --shape to generate")
    dims[0], dims[PAST_AXIS] = batch, 0
    return np.zeros(dims, _dtype(spec))


def _dtype(spec: TensorSpec) -> np.dtype:
    return np.dtype({"float": "float32", "double": "float64"}.get(spec.dtype, spec.dtype))


def decode(step: Step, lay: Layout, inputs: tuple[TensorSpec, ...], prompt: list[int], n: int,
           teacher: list[int] | None = None, context: dict[str, np.ndarray] | None = None) -> Decoded:
    """``n`` greedy steps after ``prompt``; ``teacher``: the tokens to feed instead of each step's own;
    ``context``: feeds every step gets as they are (an encoder-decoder's ``encoder_hidden_states`` and mask, its
    encoder run once). An encoder-decoder's cross-attention past starts empty and is fed what the step before
    returned (``present.N.encoder.*``), as Optimum's merged decoder is."""
    if not prompt:
        raise BadInput("generation needs a prompt of at least one token")
    specs = {s.name: s for s in inputs}
    out = Decoded()
    seq = list(prompt)
    past: dict[str, np.ndarray] = {p: _empty_past(specs[p], 1) for p in lay.past + lay.cross}
    fed = list(prompt)  # what this step feeds: the prompt, then one token
    for i in range(n):
        past_len = len(seq) - len(fed) if lay.past else 0
        if not lay.past:
            fed = list(seq)  # no cache: the whole sequence again
        feeds = {**(context or {}), **_feeds(lay, specs, fed, past_len, past)}
        t0 = time.perf_counter()
        try:
            res = step(feeds)
        except Exception as e:  # noqa: BLE001  (the runtime's own error: said with the step it stopped at)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise RunError(f"generation step {i} (past {past_len}): {first}"[:600]) from e
        out.step_ms.append((time.perf_counter() - t0) * 1e3)
        if LOGITS not in res:
            raise BadInput(f"the decoder has no '{LOGITS}' output (outputs: {', '.join(res)})")
        last = np.asarray(res[LOGITS])[0, -1].astype(np.float64)
        out.logits.append(last)
        tok = int(np.argmax(last))
        out.tokens.append(tok)
        nxt = teacher[i] if teacher is not None and i < len(teacher) else tok
        seq.append(nxt)
        fed = [nxt]
        for p, pres in zip(lay.past + lay.cross, lay.presents + lay.cross_presents):
            if pres not in res:
                raise BadInput(f"the decoder returns no '{pres}' for its input '{p}'")
            past[p] = np.asarray(res[pres])
    return out


def _feeds(lay: Layout, specs: dict[str, TensorSpec], fed: list[int], past_len: int,
           past: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    feeds = {lay.ids: np.asarray([fed], _dtype(specs[lay.ids]))}
    if lay.mask:
        feeds[lay.mask] = np.ones((1, past_len + len(fed)), _dtype(specs[lay.mask]))
    if lay.positions:
        feeds[lay.positions] = np.arange(past_len, past_len + len(fed), dtype=_dtype(specs[lay.positions]))[None]
    if lay.cache_branch:
        feeds[lay.cache_branch] = np.asarray([past_len > 0])
    for p in lay.past + lay.cross:
        feeds[p] = past[p].astype(_dtype(specs[p]), copy=False)
    return feeds


def margin(logits: np.ndarray) -> float:
    """The top-1 / top-2 gap of one step's scores (a near-tie lets a tiny drift change the token)."""
    top = np.sort(np.asarray(logits, np.float64))[-2:]
    return float(top[1] - top[0]) if top.size == 2 else float("inf")


def default_prompt(vocab: int | None, length: int = 4, seed: int = 0) -> list[int]:
    """A prompt of the model's vocabulary, seeded (``vocab``: the size of the table ``input_ids`` indexes)."""
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(1 if (vocab or 10) > 1 else 0, vocab or 10, length)]


def prompt_ids(v, option: str = "--prompt-ids") -> tuple[int, ...]:
    """``"1,2,3"`` or ``[1, 2, 3]`` -> token ids (a usage error for anything else)."""
    from portability.core.errors import UsageError

    if v is None or v == "":
        return ()
    parts = v.split(",") if isinstance(v, str) else list(v)
    try:
        ids = tuple(int(str(x).strip()) for x in parts)
    except ValueError:
        raise UsageError(f"{option} must be comma-separated token ids, got {v!r}"[:200]) from None
    if any(i < 0 for i in ids):
        raise UsageError(f"{option}: token ids are not negative, got {v!r}"[:200])
    return ids
