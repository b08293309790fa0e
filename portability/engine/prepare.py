"""The check's second stage, after the plan: what every target's job reads, made once in the run's folder —
the feeds file, the calibration data, the robustness pass's perturbed (and adversarial) inputs — and the
static shapes converters get. Nothing here starts a process that runs a target.

Calibration (what the converters that calibrate, the static int8 ones, quantize with) and evaluation never
use the same samples unless the user says so: ``--calibration FILE`` gives samples of their own; else, with
``--dataset``, its last ``min(64, n // 5)`` samples (in whole batches) are held out — they calibrate and are
not evaluated, the check's feeds keep the rest — and ``--calibrate-on-eval`` calibrates on the evaluated
samples instead. ``--inputs`` and synthesized inputs calibrate on themselves (the report says so, with a
warning for synthesized ones: random calibration is itself a cause of collapse)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from portability.core import inputs as inp
from portability.core.errors import BadInput, UsageError
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
    #: the calibration samples for quantizing converters, a feeds file ("": the feeds themselves)
    calibration: str
    #: the robustness pass (``metrics.robustness.run.Robustness``), with ``--robustness``
    robustness: Any = None
    #: ``--generate``: ``{"steps": N, "prompt": [token ids]}`` (empty without)
    generation: dict = field(default_factory=dict)
    #: where the calibration samples came from, as the converters are told ("dataset", "file", "synthesized")
    calibration_source: str = ""
    #: what the report states of them (``Calibration.facts``)
    calibration_facts: dict = field(default_factory=dict)

    @property
    def check_id(self) -> str:
        """Unique per check (the run's folder is a fresh temporary one)."""
        return self.workdir.name


def prepare(model: ModelInfo, feeds: inp.Feeds, opts: CheckOptions, workdir: Path,
            encoder: ModelInfo | None = None) -> Prepared:
    """Write the feeds and the calibration data (with ``--dataset``, the held-out samples leave ``feeds``: see the
    module's docstring), craft the robustness pass's inputs where asked; ``encoder``: ``--encoder``'s model, read
    beside the model (``--generate`` on an encoder-decoder's decoder)."""
    in_names = tuple(i.name for i in model.inputs)
    conv = getattr(opts, "convert_shapes", None) or {}
    shapes = {s.name: [int(d) for d in conv.get(s.name, feeds.arrays[s.name].shape[1:])]
              for s in model.inputs if any(not isinstance(d, int) for d in s.shape)}
    cal = calibration(model, feeds, opts, workdir)
    feeds_file = workdir / "feeds.npz"
    save_feeds(feeds.arrays, feeds_file, in_names)
    rob = None
    if opts.robustness:
        from portability.metrics.robustness import run as robust

        rob = robust.prepare(model, feeds, opts, workdir)
    return Prepared(workdir, feeds_file, in_names, shapes, cal.file, rob, generation(model, opts, encoder),
                    calibration_source=cal.source, calibration_facts=cal.facts)


def generation(model: ModelInfo, opts: CheckOptions, encoder: ModelInfo | None = None) -> dict:
    """``--generate``'s steps and prompt, checked against the model: a decoder's, ids inside its vocabulary."""
    if not getattr(opts, "generate", 0):
        return {}
    from portability.core import decoder
    from portability.core.generate import default_prompt

    lay = decoder.layout(model)
    if lay is None:
        raise UsageError("--generate needs a causal language model's decoder: input_ids with past key/value inputs "
                         "(past_key_values.N.key/value) or present outputs, as Optimum exports them")
    if lay.states:
        return _encoder_decoder(model, opts, encoder)
    vocab = model.index_bounds.get(lay.ids)
    prompt = list(opts.prompt_ids) or default_prompt(vocab, seed=opts.seed)
    if vocab and max(prompt) >= vocab:
        raise UsageError(f"--prompt-ids: token {max(prompt)} is outside the vocabulary (0..{vocab - 1})")
    return {"steps": int(opts.generate), "prompt": prompt}


def _encoder_decoder(model: ModelInfo, opts: CheckOptions, enc: ModelInfo | None) -> dict:
    """``--generate`` on an encoder-decoder's decoder: the encoder (``--encoder``) each target runs once on the
    prompt (its input ids), and the decoder's start token (``decoder_start_token_id`` of a ``config.json``
    beside the decoder, as Optimum exports it; else 0, T5's pad id)."""
    from portability.core.generate import default_prompt

    if enc is None:
        raise UsageError("--generate on an encoder-decoder's decoder (it reads encoder_hidden_states) needs its "
                         "encoder: --encoder encoder_model.onnx")
    names = [i.name for i in enc.inputs]
    ids = next((n for n in ("input_ids", "input_features") if n in names), None)
    if ids != "input_ids" or not enc.outputs:
        raise UsageError(f"--encoder: an encoder of token ids (input_ids) is needed, this one takes {', '.join(names)}")
    vocab = enc.index_bounds.get(ids)
    prompt = list(opts.prompt_ids) or default_prompt(vocab, seed=opts.seed)
    if vocab and max(prompt) >= vocab:
        raise UsageError(f"--prompt-ids: token {max(prompt)} is outside the encoder's vocabulary (0..{vocab - 1})")
    return {"steps": int(opts.generate), "prompt": prompt, "start": _start_token(Path(model.path).parent / "config.json"),
            "encoder": {"source": enc.artifact().to_dict(), "signature": enc.signature(), "ids": ids,
                        "mask": "attention_mask" if "attention_mask" in names else None,
                        "states": next((o.name for o in enc.outputs if o.name == "last_hidden_state"), enc.outputs[0].name)}}


def _start_token(cfg: Path) -> int:
    """``decoder_start_token_id`` of the ``config.json`` beside a decoder (0 without one): a file of the model's
    own folder (a link out of it is refused), at most 1 MiB, a JSON object whose id is a non-negative int."""
    import json

    if not cfg.exists():
        return 0
    if cfg.is_symlink() or not cfg.is_file() or cfg.stat().st_size > 2**20:
        raise UsageError(f"{cfg}: not a regular file of at most 1 MiB in the model's folder")
    try:
        doc = json.loads(cfg.read_text(errors="replace"))
    except ValueError as e:
        raise UsageError(f"{cfg}: not JSON ({e})") from None
    start = doc.get("decoder_start_token_id") if isinstance(doc, dict) else None
    if start is None:
        return 0
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise UsageError(f"{cfg}: decoder_start_token_id {start!r} is not a token id")
    return start


#: a ``--dataset``'s calibration share, held out from evaluation: its last min(HOLD_OUT_MAX, n // HOLD_OUT_PART)
#: samples, in whole batches (none where that is under one batch: the evaluated samples then calibrate, said so)
HOLD_OUT_MAX = 64
HOLD_OUT_PART = 5


@dataclass(frozen=True)
class Calibration:
    """What the converters that calibrate get, and what the report states of it."""

    #: a feeds file of the calibration samples ("": the check's feeds themselves)
    file: str
    #: where they came from, as the converters are told: "dataset", "file" or "synthesized"
    source: str
    #: the report's facts (``report/calibration.py``): ``source`` ("dataset", "file", "inputs" or "synthesized"),
    #: ``given`` (the samples handed to the converters), ``held_out`` (none of them is evaluated), ``path`` (their
    #: file); for a held-out share ``of`` and ``evaluated`` (the dataset's samples, those evaluated); ``why`` (a
    #: dataset's evaluated samples calibrate); ``shared`` (--calibration samples that are evaluated too)
    facts: dict


def calibration(model: ModelInfo, feeds: inp.Feeds, opts: CheckOptions, workdir: Path) -> Calibration:
    """The calibration samples (the module's docstring says which), written to ``calibration.npz`` in ``workdir``
    where they are not the feeds. With ``--dataset`` and no ``--calibration``, the held-out samples leave
    ``feeds`` (its arrays and labels keep the evaluated ones)."""
    in_names = tuple(i.name for i in model.inputs)
    path = workdir / "calibration.npz"
    if getattr(opts, "calibration", None):
        if getattr(opts, "calibrate_on_eval", False):
            raise UsageError("give --calibration FILE or --calibrate-on-eval, not both")
        rows = read_calibration(model, Path(opts.calibration), sample_shapes(model, feeds, opts))
        save_feeds({k: v[:, None] for k, v in rows.items()}, path, in_names)  # one sample per batch: rows again
        shared = _shared(rows, {k: v.reshape((v.shape[0] * v.shape[1],) + v.shape[2:]) for k, v in feeds.arrays.items()})
        facts = {"source": "file", "given": len(next(iter(rows.values()))), "held_out": not shared,
                 "path": str(opts.calibration), **({"shared": shared} if shared else {})}
        return Calibration(str(path), "file", facts)
    if getattr(opts, "calibration_feeds", None):  # a grid's further shape: the first shape's feeds, as converted
        with np.load(opts.calibration_feeds, allow_pickle=False) as z:
            given = {str(n): z[f"arr_{i}"] for i, n in enumerate(z["names"])}
        save_feeds(given, path, in_names)
        a = next(iter(given.values()))
        return Calibration(str(path), feeds.source, {"source": feeds.source, "given": int(np.prod(a.shape[:2])),
                                                     "held_out": False, "path": None})
    if feeds.source == "dataset":
        return _held_out(feeds, opts, path, in_names)
    if feeds.source == "file":  # --inputs: the compared samples calibrate (the report says so)
        return Calibration("", "file", {"source": "inputs", "given": feeds.samples, "held_out": False,
                                        "path": str(opts.inputs) if opts.inputs else None})
    return Calibration("", feeds.source, {"source": feeds.source, "given": feeds.samples, "held_out": False, "path": None})


def _held_out(feeds: inp.Feeds, opts: CheckOptions, path: Path, in_names: tuple[str, ...]) -> Calibration:
    """``--dataset``'s last ``min(HOLD_OUT_MAX, n // HOLD_OUT_PART)`` samples, in whole batches, taken out of
    ``feeds`` to calibrate; the evaluated samples themselves with ``--calibrate-on-eval`` or too few to spare."""
    n, nb = feeds.samples, feeds.batches
    batch = max(1, n // nb)
    facts = {"source": "dataset", "given": n, "held_out": False, "path": str(opts.dataset) if opts.dataset else None}
    if getattr(opts, "calibrate_on_eval", False):
        return Calibration("", "dataset", {**facts, "why": "--calibrate-on-eval"})
    k = min(HOLD_OUT_MAX, n // HOLD_OUT_PART) // batch
    if k == 0:
        why = f"{n} samples are too few to hold some out for calibration: that takes {HOLD_OUT_PART * batch}"
        return Calibration("", "dataset", {**facts, "why": why})
    held = {name: a[nb - k:] for name, a in feeds.arrays.items()}
    feeds.arrays = {name: a[:nb - k] for name, a in feeds.arrays.items()}
    if feeds.labels is not None:
        feeds.labels = feeds.labels[:nb - k]
    save_feeds(held, path, in_names)
    return Calibration(str(path), "dataset", {**facts, "given": k * batch, "held_out": True, "of": n,
                                              "evaluated": (nb - k) * batch})


def sample_shapes(model: ModelInfo, feeds: inp.Feeds, opts: CheckOptions) -> dict[str, tuple[int, ...]]:
    """Each input's shape of one sample (the batch axis left out) as the converters see it: ``convert_shapes``
    (a grid's further shape), else the feeds'."""
    conv = getattr(opts, "convert_shapes", None) or {}
    return {s.name: tuple(int(d) for d in conv[s.name][1:]) if s.name in conv else tuple(feeds.arrays[s.name].shape[2:])
            for s in model.inputs}


def read_calibration(model: ModelInfo, path: Path, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """``--calibration``'s samples, per input ``[n, *shapes[input]]``, laid out as ``--dataset``'s ('x' for a
    single-input model, else one array per input; a 'y' is ignored). A one-line BadInput for a file that is not
    a readable .npz, an input without its array, samples of another shape or kind of dtype, NaN/Inf values, or
    inputs with different numbers of samples."""
    where = f"--calibration {path}"
    try:
        data = inp._read_npz(path, "--calibration")
    except BadInput as e:  # said of the file: named as the flag's
        raise (e if str(e).startswith("--calibration") else BadInput(f"--calibration: {e}")) from None
    names = [i.name for i in model.inputs]
    if len(names) == 1 and names[0] not in data and "x" in data:
        data = {names[0]: data["x"]}
    rows: dict[str, np.ndarray] = {}
    for spec in model.inputs:
        if spec.name not in data:
            raise BadInput(f"{where}: no array for input '{spec.name}'" + (" (a single-input model reads 'x')" if
                           len(names) == 1 else "") + f"; arrays found: {', '.join(sorted(data)) or 'none'}")
        x, want = np.asarray(data[spec.name]), shapes[spec.name]
        if x.ndim != len(want) + 1 or tuple(x.shape[1:]) != want:
            raise BadInput(f"{where}: input '{spec.name}' samples have shape {list(x.shape[1:])}, expected "
                           f"{list(want)} (samples stacked on the first axis, as --dataset's)")
        dt = inp._np_dtype(spec)
        if x.dtype != dt:
            if not (x.dtype.kind == dt.kind or (x.dtype.kind in "iu" and dt.kind in "iu")):
                raise BadInput(f"{where}: input '{spec.name}' has dtype {x.dtype}, expected {dt.name}")
            x = x.astype(dt)
        if x.dtype.kind in "fc" and not np.isfinite(x).all():
            raise BadInput(f"{where}: input '{spec.name}' holds {int(x.size - np.isfinite(x).sum())} NaN/Inf values: "
                           "no calibration range can be taken from them")
        rows[spec.name] = np.ascontiguousarray(x)
    counts = sorted({len(v) for v in rows.values()})
    if len(counts) > 1:
        raise BadInput(f"{where}: inputs hold different numbers of samples ({counts})")
    if not counts or counts[0] == 0:
        raise BadInput(f"{where}: no samples")
    return rows


def _shared(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> int:
    """How many samples of ``a`` (rows per input) are also samples of ``b``, compared by their bytes."""
    def digests(rows: dict[str, np.ndarray]) -> list[bytes]:
        names = sorted(rows)
        out = []
        for i in range(len(rows[names[0]])):
            h = hashlib.sha256()
            for n in names:
                h.update(np.ascontiguousarray(rows[n][i]).tobytes())
            out.append(h.digest())
        return out

    seen = set(digests(b))
    return sum(d in seen for d in digests(a))
