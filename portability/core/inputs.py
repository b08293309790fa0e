"""Inputs for a check: synthesized from the signature, read from ``--inputs``, or a labelled ``--dataset``.

Every source ends as :class:`Feeds`: per input, an array ``[n_batches, *resolved_shape]`` (one row per
inference), plus labels ``[n_batches, batch]`` for a dataset. Files are read with ``allow_pickle=False``.
"""
from __future__ import annotations

import logging
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from portability.core.errors import BadInput, UsageError
from portability.core import decoder, roles
from portability.core.model import ModelInfo, TensorSpec
from portability.core.status import Status

log = logging.getLogger(__name__)

DEFAULT_BATCH = 1
DEFAULT_OTHER_DIM = 32
DEFAULT_SAMPLES = 8


@dataclass
class Feeds:
    arrays: dict[str, np.ndarray]
    source: str  # "synthesized" | "file" | "dataset"
    seed: int | None = None
    labels: np.ndarray | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def batches(self) -> int:
        return next(iter(self.arrays.values())).shape[0]

    @property
    def samples(self) -> int:
        """Inference rows (batches × batch size of the first input)."""
        a = next(iter(self.arrays.values()))
        return a.shape[0] * (a.shape[1] if a.ndim > 1 else 1)

    def batch(self, i: int) -> dict[str, np.ndarray]:
        return {k: v[i] for k, v in self.arrays.items()}


def parse_shapes(specs: list[str] | None, model: ModelInfo) -> dict[str, tuple[int, ...]]:
    """``["x=1x3x224x224"]`` -> {"x": (1, 3, 224, 224)}; a single input may omit its name."""
    out: dict[str, tuple[int, ...]] = {}
    names = [i.name for i in model.inputs]
    for s in specs or []:
        name, sep, dims = s.rpartition("=")
        if not sep:
            if len(names) != 1:
                raise UsageError(f"--shape '{s}': name the input (NAME=DIMS); inputs are {', '.join(names)}")
            name, dims = names[0], s
        if name not in names:
            raise UsageError(f"--shape names unknown input '{name}' (inputs: {', '.join(names)})")
        if not re.fullmatch(r"\d+(x\d+)*", dims):
            raise UsageError(f"--shape '{s}': dims must be positive, like 1x3x224x224")
        shape = tuple(int(d) for d in dims.split("x"))
        spec = next(i for i in model.inputs if i.name == name)
        if 0 in shape and not _empty_past(model, name, shape):
            raise UsageError(f"--shape '{s}': dims must be positive, like 1x3x224x224 (a decoder's past "
                             f"alone may be empty: its length 0, the prefill)")
        if len(shape) != len(spec.shape):
            raise UsageError(f"--shape '{s}': input '{name}' has rank {len(spec.shape)}, got {len(shape)} dims")
        for want, got in zip(spec.shape, shape):
            if isinstance(want, int) and want != got:
                raise UsageError(f"--shape '{s}': input '{name}' has a fixed shape {_fmt(spec.shape)}")
        out[name] = shape
    return out


def _empty_past(model: ModelInfo, name: str, shape: tuple[int, ...]) -> bool:
    """True for a decoder's past key/value input whose length alone is 0 (``core/decoder.py``): the prefill."""
    lay = decoder.layout(model)
    return (lay is not None and name in lay.past and len(shape) > decoder.PAST_AXIS
            and [i for i, d in enumerate(shape) if d == 0] == [decoder.PAST_AXIS])


#: the height and width of an image input whose size the model does not say (a common training size)
DEFAULT_IMAGE_SIZE = 224


def image_axes(shape: tuple) -> tuple[int, int] | None:
    """The (height, width) axes of an image-like 4-D input with a fixed channel count of 1, 3 or 4 (NCHW
    or NHWC) whose height and width are not fixed; None for any other input."""
    if len(shape) != 4:
        return None
    for c, hw in ((1, (2, 3)), (3, (1, 2))):
        if shape[c] in (1, 3, 4) and not any(isinstance(shape[a], int) for a in hw):
            return hw
    return None


def resolve_shapes(model: ModelInfo, given: dict[str, tuple[int, ...]]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """Concrete shapes for every input: ``given`` first, then named dims shared across inputs, then
    the defaults (leading dim -> 1; an image's height and width -> the size the model's metadata gives,
    else 224; any other -> 32), each default use reported as a warning."""
    named: dict[str, int] = {}
    for name, shape in given.items():
        spec = next(i for i in model.inputs if i.name == name)
        for d, v in zip(spec.shape, shape):
            if isinstance(d, str):
                named.setdefault(d, v)
    shapes: dict[str, tuple[int, ...]] = {}
    warnings: list[str] = []
    lay = decoder.layout(model)
    for spec in model.inputs:
        if spec.name in given:
            shapes[spec.name] = given[spec.name]
            continue
        dims = []
        image = image_axes(spec.shape)
        if image and any(isinstance(spec.shape[a], str) and spec.shape[a] in named for a in image):
            image = None  # another input's given shape names these dims already
        hw = model.image_size or (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)
        if image:
            why = (f"the size in the model's metadata '{model.image_size_from}'" if model.image_size
                   else "a common image size; the model does not say its own")
            warnings.append(f"input '{spec.name}' is an image of dynamic height and width: using {hw[0]}x{hw[1]} "
                            f"({why}; set it with --shape {spec.name}=...)")
        for axis, d in enumerate(spec.shape):
            if isinstance(d, int):
                dims.append(d)
            elif isinstance(d, str) and d in named:
                dims.append(named[d])
            elif lay is not None and spec.name == lay.mask and axis == 1:
                dims.append(0)  # past + sequence: ``decoder.consistent`` sets it once both are known
            elif image and axis in image:
                v = hw[image.index(axis)]
                if isinstance(d, str):
                    named[d] = v
                dims.append(v)
            else:
                audio = roles.audio_length(roles.role_of(spec.name), model.sample_rate) if axis == len(spec.shape) - 1 > 0 else None
                v = audio[0] if audio else DEFAULT_BATCH if axis == 0 else DEFAULT_OTHER_DIM
                if isinstance(d, str):
                    named[d] = v
                dims.append(v)
                why = f"{audio[1]}; " if audio else ""
                warnings.append(f"input '{spec.name}' axis {axis} ('{d or '?'}') is dynamic: using {v} ({why}set it with --shape {spec.name}=...)")
        shapes[spec.name] = tuple(dims)
    shapes, said = decoder.consistent(model, shapes, set(given))
    return shapes, warnings + said


def synthesize(model: ModelInfo, shapes: dict[str, tuple[int, ...]], batches: int, seed: int,
               value_range: tuple[float, float] = (0.0, 1.0)) -> Feeds:
    """Seeded random inputs: floats uniform in ``value_range``; integers inside the range of the table
    they index (when the graph shows one) else [0, 10); bools 50/50. An input whose name says its role
    (``roles.ROLES``: an attention mask, token type ids, position ids, token ids) gets values that fit it,
    each role taken said in the warnings."""
    rng = np.random.default_rng(seed)
    arrays = {}
    notes: list[str] = []
    made_for_decoder = _decoder_inputs(model, shapes, batches)
    for spec in model.inputs:
        shape = (batches,) + shapes[spec.name]
        dt = _np_dtype(spec)
        if spec.name in made_for_decoder:
            arrays[spec.name] = made_for_decoder[spec.name].astype(dt)
        elif dt.kind == "f" and roles.role_of(spec.name) != "attention mask":
            lo, hi = value_range
            arrays[spec.name] = rng.uniform(lo, hi, shape).astype(dt)
        elif (made := roles.fill(roles.role_of(spec.name) or "", shape, dt, rng, model.index_bounds.get(spec.name), spec.name)):
            arrays[spec.name] = made[0]
            notes.append(made[1])
        elif dt.kind in "iu":
            hi = model.index_bounds.get(spec.name, 10)
            arrays[spec.name] = rng.integers(0, max(hi, 1), shape).astype(dt)
        elif dt.kind == "b":
            arrays[spec.name] = rng.random(shape) < 0.5
        else:
            raise BadInput(f"cannot synthesize input '{spec.name}' of dtype {spec.dtype}: give --inputs")
    return Feeds(arrays, "synthesized", seed=seed, warnings=notes)


def _decoder_inputs(model: ModelInfo, shapes: dict[str, tuple[int, ...]], batches: int) -> dict[str, np.ndarray]:
    """A decoder's mask (ones over past + sequence), positions (past onwards) and cache branch (on with a
    past), consistent with each other (``core/decoder.py``); empty for other models."""
    lay = decoder.layout(model)
    if lay is None:
        return {}
    past, seq = decoder.lengths(model, lay, shapes)
    out: dict[str, np.ndarray] = {}
    if lay.mask:
        out[lay.mask] = np.ones((batches,) + shapes[lay.mask])
    if lay.positions:
        out[lay.positions] = np.broadcast_to(past + np.arange(seq), (batches,) + shapes[lay.positions])
    if lay.cache_branch:
        out[lay.cache_branch] = np.full((batches,) + shapes[lay.cache_branch], past > 0)
    return out


def _np_dtype(spec: TensorSpec) -> np.dtype:
    try:
        return np.dtype(spec.dtype)
    except TypeError:
        raise BadInput(f"input '{spec.name}' has dtype {spec.dtype}, which numpy cannot hold") from None


def _fmt(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _read_npz(path: Path, what: str) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise BadInput(f"{what} file not found: {path}")
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":
            raise BadInput(f"{path} is not a readable .npz file (not a zip archive; save it with numpy.savez)")
    _check_npz_sizes(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except MemoryError:
        raise BadInput(f"{path}: its arrays do not fit in memory") from None
    except ValueError as e:
        if "pickle" in str(e):
            raise BadInput(f"{path} holds Python objects: pickled data is refused (save plain numeric arrays)") from None
        raise BadInput(f"{path} is not a readable .npz file: {e}") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise BadInput(f"{path} is not a readable .npz file ({type(e).__name__})") from None
    except Exception as e:  # noqa: BLE001 - a damaged member (its compression, its header): unreadable, said once
        raise BadInput(f"{path} is not a readable .npz file ({type(e).__name__})") from None


def _check_npz_sizes(path: Path) -> None:
    """Refuse, from the array headers alone, members that claim more memory than the machine has."""
    import psutil

    budget = psutil.virtual_memory().available // 2
    total = 0
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                    shape, _, dtype = reader(f)
                if dtype.hasobject:
                    raise BadInput(f"{path}: array '{info.filename[:-4]}' holds Python objects: pickled data is refused (save plain numeric arrays)")
                total += int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    except BadInput:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise BadInput(f"{path} is not a readable .npz file ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    except Exception as e:  # noqa: BLE001 - a damaged member (its compression, its header tokens): unreadable
        raise BadInput(f"{path} is not a readable .npz file ({type(e).__name__})") from None
    if total > budget:
        raise BadInput(f"{path}: its arrays claim {total / 2**30:.1f} GiB, more than half the memory available here")


def _conform(name: str, arr: np.ndarray, spec: TensorSpec, shape: tuple[int, ...] | None, where: str, warnings: list[str]) -> np.ndarray:
    """``arr`` as ``[n_batches, *shape]``: one batch (model rank) or stacked batches (rank + 1)."""
    want = _np_dtype(spec)
    if arr.dtype != want:
        if arr.dtype.kind == want.kind or (arr.dtype.kind in "iu" and want.kind in "iu"):
            warnings.append(f"{where}: input '{name}' converted from {arr.dtype} to {want}")
            arr = arr.astype(want)
        else:
            raise BadInput(f"{where}: input '{name}' has dtype {arr.dtype}, expected {want.name}")
    rank = len(spec.shape)
    if arr.ndim == rank:
        arr = arr[None]
    elif arr.ndim != rank + 1:
        raise BadInput(f"{where}: input '{name}' has shape {list(arr.shape)}, expected {_fmt(spec.shape)} (or a stack of those)")
    for axis, (d, got) in enumerate(zip(spec.shape, arr.shape[1:])):
        fixed = d if isinstance(d, int) else (shape[axis] if shape else None)
        if fixed is not None and fixed != got:
            raise BadInput(f"{where}: input '{name}' has shape {list(arr.shape[1:])}, expected {_fmt(shape or spec.shape)}")
    if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        bad = int(arr.size - np.isfinite(arr).sum())
        warnings.append(f"{where}: input '{name}' holds {bad} NaN/Inf values (as given): outputs computed from them "
                        "say little about agreement")
    return np.ascontiguousarray(arr)


def from_file(model: ModelInfo, path: Path, given: dict[str, tuple[int, ...]]) -> Feeds:
    """``--inputs``: one array per input name (one batch, or a stack of batches)."""
    data = _read_npz(path, "--inputs")
    names = [i.name for i in model.inputs]
    missing = [n for n in names if n not in data]
    if missing:
        spec = next(i for i in model.inputs if i.name == missing[0])
        raise BadInput(f"{path}: no array for input '{spec.name}' ({spec.dtype} {_fmt(spec.shape)}); arrays found: {', '.join(data) or 'none'}")
    extra = [k for k in data if k not in names]
    if extra:
        raise BadInput(f"{path}: array '{extra[0]}' matches no model input (inputs: {', '.join(names)})")
    warnings: list[str] = []
    arrays = {s.name: _conform(s.name, data[s.name], s, given.get(s.name), str(path), warnings) for s in model.inputs}
    counts = {a.shape[0] for a in arrays.values()}
    if len(counts) > 1:
        raise BadInput(f"{path}: inputs hold different numbers of batches ({sorted(counts)})")
    return Feeds(arrays, "file", warnings=warnings)


def from_dataset(model: ModelInfo, path: Path, shapes: dict[str, tuple[int, ...]], limit: int | None) -> Feeds:
    """``--dataset``: ``x`` (single-input models) or one array per input, samples on axis 0, and ``y``
    integer class labels; samples are grouped into batches of the model's batch size."""
    data = _read_npz(path, "--dataset")
    if "y" not in data:
        raise BadInput(f"{path}: no 'y' array of labels (a dataset needs x and y)")
    y = np.asarray(data["y"])
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise BadInput(f"{path}: 'y' must be a 1-D array of integer class labels, got {y.dtype} {list(y.shape)}")
    names = [i.name for i in model.inputs]
    if len(names) == 1 and "x" in data and names[0] not in data:
        per_input = {names[0]: data["x"]}
    else:
        missing = [n for n in names if n not in data]
        if missing:
            raise BadInput(f"{path}: no array for input '{missing[0]}'" + (" (a single-input model reads 'x')" if len(names) == 1 else ""))
        per_input = {n: data[n] for n in names}
    n = len(y)
    warnings: list[str] = []
    arrays = {}
    batch = None
    for spec in model.inputs:
        x = per_input[spec.name]
        shape = shapes[spec.name]
        if x.ndim == 0 or x.shape[0] != n:
            raise BadInput(f"{path}: input '{spec.name}' has {x.shape[0] if x.ndim else 0} samples but y has {n}")
        if x.ndim != len(shape) or tuple(x.shape[1:]) != shape[1:]:
            raise BadInput(f"{path}: input '{spec.name}' samples have shape {list(x.shape[1:])}, expected {list(shape[1:])} (model input {_fmt(spec.shape)})")
        if batch is not None and shape[0] != batch:
            raise BadInput(f"{path}: inputs have different batch sizes ({batch} and {shape[0]} for '{spec.name}'); set them with --shape")
        batch = shape[0]
        arrays[spec.name] = x
    if limit:
        n = min(n, limit)
    nb = n // batch
    if nb == 0:
        raise BadInput(f"{path}: {n} samples is fewer than one batch of {batch}")
    if nb * batch != n:
        warnings.append(f"--dataset: the last {n - nb * batch} samples do not fill a batch of {batch} and are left out")
    out = {}
    for spec in model.inputs:
        x = arrays[spec.name][: nb * batch]
        x = x.reshape((nb,) + shapes[spec.name])
        out[spec.name] = _conform(spec.name, x, spec, shapes[spec.name], str(path), warnings)
    labels = y[: nb * batch].reshape(nb, batch).astype(np.int64)
    return Feeds(out, "dataset", labels=labels, warnings=warnings)


def prepare(model: ModelInfo, opts) -> Feeds:
    """The check's feeds, as its options (``settings.options.CheckOptions``) ask: ``--dataset``'s labelled
    samples, ``--inputs``' arrays, or inputs synthesized from the signature at the resolved shapes."""
    if opts.inputs and opts.dataset:
        raise UsageError("give --inputs or --dataset, not both")
    given = parse_shapes(opts.shapes, model)
    shapes, warnings = resolve_shapes(model, given)
    if opts.dataset:
        feeds = from_dataset(model, Path(opts.dataset), shapes, opts.samples)
    elif opts.inputs:
        feeds = from_file(model, Path(opts.inputs), given)
        warnings = []
    else:
        feeds = synthesize(model, shapes, opts.samples or DEFAULT_SAMPLES, opts.seed, opts.value_range)
    feeds.warnings[:0] = warnings
    return feeds


def failure_help(status: Status, feeds: Feeds, value_range: tuple[float, float], model: ModelInfo) -> list[str]:
    """[the note, the fix] when the reference failed to run (``status``) on inputs this check made up (its
    own runtime refusing them is rarely the model's fault: the values or the sizes guessed were not ones it
    takes); [] otherwise."""
    if feeds.source != "synthesized" or status not in (Status.RUN_ERROR, Status.CRASHED, Status.TIMEOUT):
        return []
    lo, hi = value_range
    kinds = {np.dtype(a.dtype).kind for a in feeds.arrays.values()}
    made = ", ".join(filter(None, [f"floats uniform in [{lo:g}, {hi:g})" if kinds & {"f"} else "",
                                   "integers in [0, 10) (or inside the table they index)" if kinds & {"i", "u"} else "",
                                   "random booleans" if "b" in kinds else ""]))
    guessed = [w.split(": using ")[0].removeprefix("input ") + " = " + w.split(": using ")[1].split(" (")[0]
               for w in feeds.warnings if ": using " in w]
    names = ", ".join(i.name for i in model.inputs)
    note = (f"the reference failed on inputs this check synthesized ({made}; seed {feeds.seed})"
            + (f" at guessed sizes ({'; '.join(guessed)})" if guessed else "")
            + ": the model may need real values or other sizes")
    fix = (f"give real inputs: --inputs FILE.npz with one array per input ({names})"
           + (", or the sizes it takes: --shape NAME=DIMS" if guessed else ""))
    return [note, fix]
