"""A causal language model's decoder recognized by its interface, so that inputs made for it agree with
each other: the past key/value tensors' length, the attention mask's (past + sequence), the positions
(past .. past + sequence - 1) and the cache branch of a merged decoder.

Hugging Face Optimum's layout (``decoder_model.onnx``, ``decoder_with_past_model.onnx``,
``decoder_model_merged.onnx``), and torch.onnx exports that follow its names: ``input_ids``,
``attention_mask``, ``position_ids``, ``past_key_values.N.key`` / ``.value`` (``[batch, heads, past, head
dim]``) and ``use_cache_branch`` in; ``logits`` and ``present.N.key`` / ``.value`` out. An encoder-decoder's
decoder names its past ``past_key_values.N.decoder.key`` and ``.encoder.key``: only the decoder's grow. A
``torch.export`` program's inputs are its arguments' names, so ``_`` separates there as well as ``.``
(``past_key_values_0_key``); its outputs are a returned dict's keys (``present.0.key``); each past's present is
found by layer and kind, whatever the separators.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from portability.core.model import ModelInfo, TensorSpec

#: a past tensor of the decoder's own cache (not an encoder-decoder's cross-attention cache)
_PAST = re.compile(r"past_key_values?[._](\d+)[._](decoder[._])?(key|value)", re.IGNORECASE)
_CROSS = re.compile(r"past_key_values?[._](\d+)[._]encoder[._](key|value)", re.IGNORECASE)
_PRESENT = re.compile(r"present[._](\d+)[._]((de|en)coder[._])?(key|value)", re.IGNORECASE)
#: the axis of a past tensor that counts positions (``[batch, heads, past, head dim]``)
PAST_AXIS = 2


@dataclass(frozen=True)
class Layout:
    """The roles a decoder's inputs play (names), and where its lengths live."""

    ids: str
    #: the decoder's own past tensors, and the encoder-decoder's cross-attention ones (fixed length)
    past: tuple[str, ...]
    cross: tuple[str, ...] = ()
    mask: str | None = None
    positions: str | None = None
    cache_branch: str | None = None
    #: the output that returns each past's next value, in ``past``'s order (``present.N.key``)
    presents: tuple[str, ...] = ()
    #: an encoder-decoder's decoder: the encoder's output and mask it reads (fixed over the steps), and the
    #: outputs that return the cross-attention cache, in ``cross``'s order (``present.N.encoder.key``)
    states: str | None = None
    states_mask: str | None = None
    cross_presents: tuple[str, ...] = ()

    def describe(self, past_len: int, seq_len: int) -> str:
        """The note a check makes of it."""
        parts = [f"{len(self.past) // 2} layers of past keys and values ('{self.past[0]}', ...)" if self.past
                 else "no past keys and values"]
        if self.mask:
            parts.append(f"'{self.mask}' covering past + sequence ({past_len} + {seq_len})")
        if self.positions:
            parts.append(f"'{self.positions}' counting on from the past ({past_len}..{past_len + seq_len - 1})")
        if self.cache_branch:
            parts.append(f"'{self.cache_branch}' {'on' if past_len else 'off'}")
        if self.states:
            parts.append(f"an encoder-decoder's decoder: '{self.states}' (batch, encoder sequence, width)"
                         + (f", '{self.states_mask}'" if self.states_mask else "")
                         + (f" and {len(self.cross) // 2} layers of cross-attention past" if self.cross else "")
                         + " over the same encoder sequence")
        return (f"read as a causal language model's decoder (Optimum's layout, by its inputs' names): "
                + "; ".join(parts) + "; give --inputs FILE.npz to set them")


def layout(model: ModelInfo) -> Layout | None:
    """The decoder's layout, or None when the model is not a decoder (no ``input_ids``, or neither past inputs
    nor present outputs beside it)."""
    return layout_of(model.inputs, model.outputs)


def layout_of(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> Layout | None:
    """``layout`` of a signature's inputs and outputs (a worker has the job's signature, not the model)."""
    names = {i.name: i for i in inputs}
    ids = next((n for n in ("input_ids", "decoder_input_ids") if n in names), None)
    if ids is None:
        return None
    past = tuple(sorted((n for n in names if _PAST.fullmatch(n)), key=_order))
    cross = tuple(sorted((n for n in names if _CROSS.fullmatch(n)), key=_order))
    presents = [o.name for o in outputs if _PRESENT.fullmatch(o.name)]
    if not past and not presents:
        return None  # an encoder's input_ids and mask (BERT): not a decoder
    if past and any(len(names[p].shape) != 4 for p in past):
        return None
    mask = next((n for n in ("attention_mask", "decoder_attention_mask") if n in names and len(names[n].shape) == 2), None)
    states = "encoder_hidden_states" if "encoder_hidden_states" in names else None
    return Layout(ids=ids, past=past, cross=cross, mask=mask,
                  positions=next((n for n in ("position_ids", "decoder_position_ids") if n in names), None),
                  cache_branch="use_cache_branch" if "use_cache_branch" in names else None,
                  presents=tuple(present_of(p, presents) for p in past), states=states,
                  states_mask="encoder_attention_mask" if states and "encoder_attention_mask" in names else None,
                  cross_presents=tuple(_cross_present(c, presents) for c in cross))


def present_of(past: str, presents: list[str]) -> str:
    """The output among ``presents`` that returns ``past``'s next value: the same layer and kind (key or
    value), the decoder's own where an encoder-decoder returns both; ``present.N.key`` where none does."""
    m = _PAST.fullmatch(past)
    layer, kind = int(m.group(1)), m.group(3).lower()
    same = [(o, q) for o in presents if (q := _PRESENT.fullmatch(o)) and int(q.group(1)) == layer and q.group(4).lower() == kind]
    own = [o for o, q in same if (q.group(3) or "").lower() != "en"]
    return own[0] if own else f"present.{layer}.{'decoder.' if m.group(2) else ''}{kind}"


def _cross_present(past: str, presents: list[str]) -> str:
    """The output that returns the cross-attention past ``past`` (``present.N.encoder.key``)."""
    m = _CROSS.fullmatch(past)
    layer, kind = int(m.group(1)), m.group(2).lower()
    return next((o for o in presents if (q := _PRESENT.fullmatch(o)) and int(q.group(1)) == layer
                 and q.group(4).lower() == kind and (q.group(3) or "").lower() == "en"),
                f"present.{layer}.encoder.{kind}")


def _order(name: str) -> tuple[int, str]:
    m = re.search(r"[._](\d+)[._]", name)
    return (int(m.group(1)) if m else 0, name)


def lengths(model: ModelInfo, lay: Layout, shapes: dict[str, tuple[int, ...]]) -> tuple[int, int]:
    """(past, sequence) lengths of resolved ``shapes``."""
    seq = shapes[lay.ids][1] if len(shapes[lay.ids]) > 1 else 1
    past = shapes[lay.past[0]][PAST_AXIS] if lay.past else 0
    return int(past), int(seq)


def consistent(model: ModelInfo, shapes: dict[str, tuple[int, ...]], given: set[str]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """``shapes`` with the attention mask's length made past + sequence (unless its shape was given), and the
    note saying how the decoder was read; unchanged (no note) for a model that is not a decoder."""
    lay = layout(model)
    if lay is None:
        return shapes, []
    past, seq = lengths(model, lay, shapes)
    out = dict(shapes)
    if lay.mask and lay.mask not in given and len(out[lay.mask]) == 2:
        out[lay.mask] = (out[lay.mask][0], past + seq)
    if lay.states and len(out.get(lay.states, ())) == 3:  # the encoder's length: its mask's and cross pasts' too
        enc = out[lay.states][1]
        if lay.states_mask and lay.states_mask not in given and len(out[lay.states_mask]) == 2:
            out[lay.states_mask] = (out[lay.states_mask][0], enc)
        for c in lay.cross:
            if c not in given and len(out[c]) == 4:
                out[c] = out[c][:PAST_AXIS] + (enc,) + out[c][PAST_AXIS + 1:]
    return out, [lay.describe(past, seq)]
