"""The role an input plays, read from its name (Hugging Face's conventional names), and values that fit it.

A role decides what :func:`portability.core.inputs.synthesize` makes for the input (a mask of ones with a
padded tail, segment ids, a range of positions, token ids inside the vocabulary) and, for audio, the length
a dynamic axis takes. Every role taken is said in a note; ``--inputs`` overrides them all.
"""
from __future__ import annotations

import re

import numpy as np

#: (name pattern, role), first match wins; patterns match the whole name, case-insensitively
ROLES: tuple[tuple[str, str], ...] = (
    (r"(\w+_)?attention_mask", "attention mask"),
    (r"(\w+_)?token_type_ids", "token type ids"),
    (r"(\w+_)?position_ids", "position ids"),
    (r"(\w+_)?input_ids|(\w+_)?token_ids", "token ids"),
    (r"input_values|audio(_values)?|waveform", "audio"),
    (r"input_features", "audio features"),
)

#: the dtype kinds a role's values are made for (others get the plain synthesized values)
KINDS = {"attention mask": "iubf", "token type ids": "iu", "position ids": "iu", "token ids": "iu"}

#: a dynamic audio length: one second at the model's sampling rate (16 kHz unless its metadata says);
#: features are frames of the feature extractors' 10 ms hop
DEFAULT_SAMPLE_RATE = 16000
FRAMES_PER_SECOND = 100

OVERRIDE = "give --inputs FILE.npz to set it"


def role_of(name: str) -> str | None:
    """The role ``name`` says, or None."""
    return next((role for pattern, role in ROLES if re.fullmatch(pattern, name, re.IGNORECASE)), None)


def audio_length(role: str | None, sample_rate: int | None) -> tuple[int, str] | None:
    """(length, why) for the dynamic length axis (the last) of an audio input; None for other roles."""
    rate = sample_rate or DEFAULT_SAMPLE_RATE
    where = "the model's metadata" if sample_rate else "the usual rate; the model does not say its own"
    if role == "audio":
        return rate, f"one second of audio at {rate} Hz, {where}"
    if role == "audio features":
        return FRAMES_PER_SECOND, "one second of audio features, 10 ms frames"
    return None


def fill(role: str, shape: tuple[int, ...], dtype: np.dtype, rng, bound: int | None, name: str) -> tuple[np.ndarray, str] | None:
    """(values, note) for an input of ``role`` and ``shape`` (``[n_batches, batch, ..., positions]``), or
    None when the role makes nothing of its own for it. ``bound`` is the size of the table it indexes."""
    if role not in KINDS or dtype.kind not in KINDS[role] or len(shape) < 2:
        return None
    n = shape[-1]
    pos = np.broadcast_to(np.arange(n), shape)
    said = f"input '{name}' read as {'an ' if role == 'attention mask' else ''}{role} (by its name)"
    if role == "attention mask":
        pad = n // 4
        rows = np.arange(int(np.prod(shape[:-1]))).reshape(shape[:-1])[..., None]
        arr = ~((rows % 2 == 1) & (pos >= n - pad))
        where = f"the last {pad} of {n} positions padded (0) in the odd rows (1, 3, ...)" if pad else "no padding"
        return arr.astype(dtype), f"{said}: ones, {where}; {OVERRIDE}"
    if role == "token type ids":
        second = 1 if bound is None or bound > 1 else 0
        arr = np.where(pos < n // 2, 0, second)
        return arr.astype(dtype), f"{said}: 0 for the first {n // 2} of {n} positions, {second} after; {OVERRIDE}"
    if role == "position ids":
        arr = pos % bound if bound else pos
        return arr.astype(dtype), f"{said}: the range 0..{n - 1} on every row; {OVERRIDE}"
    hi = bound or 10
    why = "the rows of the embedding table it indexes" if bound else "the graph does not show its table"
    return rng.integers(0, hi, shape).astype(dtype), f"{said}: integers in [0, {hi}) ({why}); {OVERRIDE}"
