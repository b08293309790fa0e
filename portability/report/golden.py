"""Golden outputs: what each target of a check produced, kept so that a later check can be compared with it
output by output — not only each run against its own reference.

A check keeps its inputs' provenance (the digest of the feeds every target ran, with their source, seed,
shapes or file) and, per target and output, the array itself while it fits ``WHOLE_BYTES``; beyond that a
fixed seeded sample of ``SAMPLE`` elements, with summary statistics and the digest of the whole array. The
history keeps them beside each run (compressed); ``--save-outputs FILE`` writes them with the report to one
``.npz`` (no pickles), which ``--baseline FILE`` and ``portability diff`` read back. The JSON report
carries their digests (``output_digests``: the inputs' provenance and, per output, its statistics, digest
and at most ``SAMPLE`` elements), so that a JSON report is a baseline for outputs too.

Comparing two sets (``compare``) uses the check's own drift metrics and each target's thresholds: a target
whose outputs moved beyond them ``changed``. When the inputs are not the same (other data, another shape)
nothing is compared, and the note says why.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: an output up to this size is kept whole (a LeNet's 500 x 10 logits are 20 KB)
WHOLE_BYTES = 64 * 1024
#: elements kept of a larger output, at positions fixed by the output's size and this seed
SAMPLE = 1024
SAMPLE_SEED = 20261125
FORMAT = "portability-golden-outputs/1"
DIGESTS_FORMAT = "portability-output-digests/1"


def digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def sample_positions(size: int) -> np.ndarray:
    """The flat positions sampled of an output with ``size`` elements (the same for the same size)."""
    if size <= SAMPLE:
        return np.arange(size)
    return np.sort(np.random.default_rng(SAMPLE_SEED).choice(size, SAMPLE, replace=False))


@dataclass
class Kept:
    """One output of one target: whole, or a sample with statistics and digest."""

    shape: tuple[int, ...]
    dtype: str
    whole: bool
    values: np.ndarray  # the array, or the sampled elements (flat)
    digest: str
    stats: dict[str, float]

    def meta(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "whole": self.whole, "digest": self.digest,
                "stats": self.stats}

    def sampled(self) -> "Kept":
        """This output as a sample: a whole one beyond ``SAMPLE`` elements cut to the elements ``keep``
        samples, its digest and statistics those of the whole array."""
        if not self.whole or self.values.size <= SAMPLE:
            return self
        flat = self.values.reshape(-1)
        return Kept(self.shape, self.dtype, False, flat[sample_positions(flat.size)], self.digest, self.stats)

    def to_json(self) -> dict[str, Any]:
        """The digest a JSON report carries: ``meta`` and the sampled elements (base64 of their bytes)."""
        k = self.sampled()
        values = np.ascontiguousarray(k.values)
        return {**k.meta(), "values_dtype": values.dtype.str,
                "values": base64.b64encode(values.tobytes()).decode("ascii")}

    @classmethod
    def from_json(cls, d: dict) -> "Kept":
        values = np.frombuffer(base64.b64decode(d["values"]), dtype=np.dtype(d["values_dtype"]))
        if d["whole"]:
            values = values.reshape(d["shape"])
        return cls(tuple(d["shape"]), d["dtype"], bool(d["whole"]), values, d["digest"], dict(d["stats"]))


def keep(arr) -> Kept:
    """An output as kept; an output whose shape varies from batch to batch (a list of arrays) is kept as
    its batches' values one after the other."""
    if isinstance(arr, (list, tuple)) or (isinstance(arr, np.ndarray) and arr.dtype == object):
        parts = [np.asarray(p).reshape(-1) for p in arr]
        arr = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    a = np.asarray(arr)
    f = a.astype(np.float64, copy=False).reshape(-1) if a.dtype.kind in "fiub" else None
    fin = f[np.isfinite(f)] if f is not None else None
    stats = {} if fin is None or not fin.size else {
        "mean": float(fin.mean()), "std": float(fin.std()), "min": float(fin.min()), "max": float(fin.max()),
        "l2": float(np.linalg.norm(fin)), "nonfinite": int(f.size - fin.size)}
    whole = a.nbytes <= WHOLE_BYTES
    values = a if whole else a.reshape(-1)[sample_positions(a.size)]
    return Kept(tuple(int(d) for d in a.shape), a.dtype.str, whole, values, digest({"a": a}), stats)


@dataclass
class Golden:
    """The inputs' provenance and every target's kept outputs (``targets[target id][output name]``)."""

    inputs: dict[str, Any]
    targets: dict[str, dict[str, Kept]] = field(default_factory=dict)

    @classmethod
    def of(cls, inputs: dict[str, Any], outputs: dict[str, dict[str, np.ndarray]]) -> "Golden":
        return cls(dict(inputs), {tid: {n: keep(a) for n, a in outs.items()} for tid, outs in outputs.items()})

    # -- one .npz file (no pickles): a JSON manifest, the report, and one array per kept output --------------
    def to_bytes(self, report: dict | None = None) -> bytes:
        meta = {"format": FORMAT, "inputs": self.inputs,
                "targets": {tid: {n: k.meta() for n, k in outs.items()} for tid, outs in self.targets.items()}}
        arrays = {"__meta__": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
        if report is not None:
            arrays["__report__"] = np.frombuffer(json.dumps(report).encode(), dtype=np.uint8)
        names = {}
        for i, (tid, outs) in enumerate(sorted(self.targets.items())):
            for j, (name, k) in enumerate(sorted(outs.items())):
                names[f"t{i}o{j}"] = (tid, name)
                arrays[f"t{i}o{j}"] = k.values
        arrays["__names__"] = np.frombuffer(json.dumps(names).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> tuple["Golden", dict | None]:
        """(the outputs, the report's dict if the file holds one); ValueError when it is not such a file."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                meta = json.loads(z["__meta__"].tobytes())
                names = json.loads(z["__names__"].tobytes())
                report = json.loads(z["__report__"].tobytes()) if "__report__" in z.files else None
                values = {key: z[key] for key in names}
        except (OSError, KeyError, ValueError, EOFError) as e:
            raise ValueError(f"not a portability outputs file ({type(e).__name__})") from None
        if meta.get("format") != FORMAT:
            raise ValueError(f"not a portability outputs file (format {meta.get('format')!r})")
        g = cls(meta["inputs"])
        for key, (tid, name) in names.items():
            m = meta["targets"][tid][name]
            g.targets.setdefault(tid, {})[name] = Kept(tuple(m["shape"]), m["dtype"], m["whole"], values[key],
                                                       m["digest"], m["stats"])
        return g, report

    def save(self, path: Path, report: dict | None = None) -> None:
        from portability.report.files import write_atomic_bytes

        write_atomic_bytes(Path(path), self.to_bytes(report))

    @classmethod
    def load(cls, path: Path) -> tuple["Golden", dict | None]:
        return cls.from_bytes(Path(path).read_bytes())

    def size_bytes(self) -> int:
        return len(self.to_bytes())

    # -- the digests a JSON report carries (``output_digests``): a few KB an output, whole arrays left out ----
    def digests(self) -> dict[str, Any]:
        """The inputs' provenance and, per target and output, its statistics, digest and sampled elements."""
        return {"format": DIGESTS_FORMAT, "inputs": self.inputs,
                "targets": {tid: {n: k.to_json() for n, k in sorted(outs.items())}
                            for tid, outs in sorted(self.targets.items())}}

    @classmethod
    def from_digests(cls, d: dict) -> "Golden":
        """ValueError when ``d`` is not a report's ``output_digests``."""
        what = d.get("format") if isinstance(d, dict) else d
        if what != DIGESTS_FORMAT:
            raise ValueError(f"not a report's output digests (format {what!r})")
        try:
            return cls(dict(d["inputs"]), {tid: {n: Kept.from_json(k) for n, k in outs.items()}
                                           for tid, outs in d["targets"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"damaged output digests ({type(e).__name__}: {e})") from None


def is_outputs_file(path: Path) -> bool:
    """A ``--save-outputs`` file (an .npz: a zip archive), not a JSON report."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"PK"
    except OSError:
        return False


@dataclass(frozen=True)
class OutputChange:
    target: str
    output: str
    metric: str
    before: Any
    after: Any
    text: str


def comparable(before: Golden, after: Golden) -> str | None:
    """None when the two ran the same inputs; else why their outputs cannot be compared."""
    a, b = before.inputs, after.inputs
    if a.get("digest") == b.get("digest"):
        return None
    if a.get("shapes") != b.get("shapes"):
        return f"the inputs have other shapes ({a.get('shapes')} → {b.get('shapes')}): outputs not compared"
    what = lambda i: i.get("path") or f"{i.get('source')} seed {i.get('seed')}"  # noqa: E731
    return f"the inputs differ ({what(a)} → {what(b)}): outputs not compared"


def _moved(k0: Kept, k1: Kept, thresholds: dict, name: str = "") -> list[tuple[str, Any, Any, str]]:
    """(metric, before, after, text) of every way output ``k1`` moved from ``k0`` beyond ``thresholds``."""
    from portability.metrics import drift
    from portability.metrics.bounds import GOLDEN, bound

    if k0.shape != k1.shape:
        return [("shape", list(k0.shape), list(k1.shape), f"shape {list(k0.shape)} → {list(k1.shape)}")]
    if k0.digest == k1.digest:
        return []
    if k0.values.dtype.kind not in "fiub" or k1.values.dtype.kind not in "fiub":
        return [("digest", k0.digest[:12], k1.digest[:12], "values changed")]
    scores = k0.whole and k1.whole and drift.looks_like_scores(k1.values, name)
    j = drift.judge(thresholds, stats={"": drift.output_drift(k0.values, k1.values)}, rule=GOLDEN,
                    agreement=drift.top1_agreement(k0.values, k1.values, name) if scores else None)
    where = "" if k1.whole else f" (on {k1.values.size} sampled elements)"
    out = [(b.bound, b.ideal, b.value, b.text + ("" if b.bound == "nonfinite" else where))
           for b in j.breaches if b.output is not None]
    t_abs = bound(thresholds, {})
    if not out and not k1.whole and t_abs is not None:  # moved where the sample does not look: the statistics
        moved = {k: abs(k1.stats.get(k, 0.0) - k0.stats.get(k, 0.0)) for k in ("min", "max", "mean")}
        worst = max(moved, key=moved.get)
        if moved[worst] > t_abs:
            out.append((f"stats.{worst}", k0.stats.get(worst), k1.stats.get(worst),
                        f"its {worst} moved by {moved[worst]:.3g} > {t_abs:.3g} (outside the sampled elements)"))
    return out + [(b.bound, b.ideal, b.value, b.text) for b in j.breaches if b.output is None]


def compare(before: Golden, after: Golden, thresholds: dict[str, dict]) -> tuple[list[OutputChange], str | None]:
    """(every output of a target in both that moved beyond that target's ``thresholds``, why nothing was
    compared or None)."""
    why = comparable(before, after)
    if why:
        return [], why
    changes = []
    for tid, outs in after.targets.items():
        for name, k1 in outs.items():
            k0 = before.targets.get(tid, {}).get(name)
            if k0 is None:
                continue
            if k0.whole != k1.whole:  # one side a sample (a JSON report's digests): the other's same elements
                k0, k1 = k0.sampled(), k1.sampled()
            for metric, x, y, text in _moved(k0, k1, thresholds.get(tid) or {}, name):
                changes.append(OutputChange(tid, name, metric, x, y, f"output '{name}' changed since the baseline: {text}"))
    return changes, None
