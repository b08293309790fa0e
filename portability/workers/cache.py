"""Content-addressed artifact cache.

key = sha256(source artifact sha256, converter name, converter version, options, calibration digest,
and the static input shapes given to a converter that uses them).
An entry is a folder ``<root>/artifacts/<key[:2]>/<key>/`` holding the converted files and
``artifact.json``; it is written in a temporary folder and renamed into place, so a killed conversion
never leaves a half entry behind.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from portability.converters.base import ConvertContext, Converter
from portability.core.dirs import default_root  # noqa: F401  (re-exported: the cache's root)
from portability.core.artifact import META_FILE, Artifact, is_meta, sha256_files, write_meta
from portability.core.status import Status

log = logging.getLogger(__name__)


def _lock(f, on_wait: Callable[[bool], None] | None) -> None:
    """An exclusive lock on ``f``, telling ``on_wait`` when another process holds it."""
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    if on_wait:
        on_wait(True)
    fcntl.flock(f, fcntl.LOCK_EX)
    if on_wait:
        on_wait(False)


def calibration_digest(cal: dict[str, np.ndarray] | None) -> str | None:
    if cal is None:
        return None
    h = hashlib.sha256()
    for name in sorted(cal):
        a = np.ascontiguousarray(cal[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def cache_key(src: Artifact, conv: Converter, options: dict[str, Any], ctx: ConvertContext) -> str:
    parts = {
        "src": src.sha256,
        "converter": conv.name(),
        "version": conv.version(),
        "options": options,
        "calibration": calibration_digest(ctx.calibration) if conv.uses_calibration else None,
    }
    shapes = conv.shapes_used(ctx)
    if shapes:  # only then: a static model's keys stay what they were
        parts["input_shapes"] = shapes
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class Cache:
    """``use=False`` (``--no-cache``) converts into a private temporary folder and keeps nothing.

    ``scope`` (a check's id): a conversion that fails is remembered beside its entry for that check, so
    that the check's other targets that need the same conversion (ten targets start from one onnx2tf run)
    fail at once with the same error instead of converting again. Only an error the converter raised is
    remembered, never a timeout or a killed worker (they leave no note), and only within the one check."""

    def __init__(self, root: Path | None = None, use: bool = True, scratch_parent: Path | None = None,
                 scope: str = ""):
        self.root = Path(root) if root else default_root()
        self.use = use
        self.scope = scope
        self._scratch: Path | None = None
        self._scratch_parent = scratch_parent

    def close(self) -> None:
        """Remove the private folder of a ``use=False`` cache."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def convert(self, conv: Converter, src: Artifact, options: dict[str, Any], ctx: ConvertContext,
                on_wait: Callable[[bool], None] | None = None,
                before: Callable[[], None] | None = None) -> tuple[Artifact, bool]:
        """The converted artifact and whether it came from the cache.

        Targets checked in parallel often need the same conversion (every TFLite variant starts from one
        onnx2tf run): the first takes the entry's lock and converts, the others wait and reuse it
        (``on_wait(True)`` when such a wait begins, ``on_wait(False)`` when it ends). ``before()`` is called
        when this process is about to make a cached conversion itself: it may raise, to leave it to another."""
        key = cache_key(src, conv, options, ctx)
        if not self.use:
            return self._convert(conv, src, options, ctx, key, None)
        entry = self.root / "artifacts" / key[:2] / key
        hit = self._cached(entry)
        if hit is not None:
            return self._measured(entry, hit), True
        self._failed_before(entry)
        entry.parent.mkdir(parents=True, exist_ok=True)
        with open(entry.parent / f".{key}.lock", "a+") as lock:
            _lock(lock, on_wait)  # released when the file closes, or when this process dies
            hit = self._cached(entry)
            if hit is not None:
                return hit, True
            self._failed_before(entry)
            if before is not None:
                before()
            if entry.exists():  # damaged (files removed by hand, an interrupted copy): convert anew
                shutil.rmtree(entry, ignore_errors=True)
            try:
                return self._convert(conv, src, options, ctx, key, entry)
            except Exception as e:
                self._remember_failure(entry, e)
                raise

    def _failed_before(self, entry: Path) -> None:
        """Raise the error this conversion already gave in this check, if it gave one, or in any check, where it
        had nothing to do for the model (``NotApplicable``)."""
        from portability.core.errors import NotApplicable

        why = not_applicable(entry)
        if why:
            raise NotApplicable(why)
        if not self.scope:
            return
        try:
            note = json.loads(failure_note(entry).read_text())
        except (OSError, ValueError):
            return
        if note.get("scope") != self.scope:
            return
        from portability.core.errors import ConvertError

        log.info("%s failed for another target of this check: not converting again", entry.name[:12])
        raise ConvertError(note["error"], op=note.get("op"), node=note.get("node"))

    def _remember_failure(self, entry: Path, e: Exception) -> None:
        from portability.core.errors import NotApplicable

        if isinstance(e, NotApplicable):  # for good: the same model and converter always say so
            note = {"not_applicable": str(e)}
        elif not self.scope or getattr(e, "status", Status.CONVERT_ERROR) not in (Status.CONVERT_ERROR, Status.RUN_ERROR):
            return
        else:
            msg = str(e).strip()
            note = {"scope": self.scope, "error": msg if msg else type(e).__name__,
                    "op": getattr(e, "op", None), "node": getattr(e, "node", None)}
        if not hasattr(e, "status") and "error" in note:  # an unexpected exception: as the worker words it
            note["error"] = f"{type(e).__name__}: {msg.splitlines()[0]}" if msg else type(e).__name__
        try:
            tmp = failure_note(entry).with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(note))
            os.replace(tmp, failure_note(entry))
        except OSError:
            pass

    @staticmethod
    def _measured(entry: Path, art: Artifact) -> Artifact:
        """An entry made before entries recorded their size: measured now, and recorded for the next use."""
        if art.size is not None:
            return art
        art = replace(art, size=art.size_info())
        try:
            write_meta(replace(art, path=art.path.relative_to(entry)), entry)
        except (OSError, ValueError) as e:  # a read-only cache: measured again next time
            log.debug("recording the size of %s: %s", entry.name[:12], e)
        return art

    @staticmethod
    def _cached(entry: Path) -> Artifact | None:
        meta = entry / META_FILE
        if not meta.is_file():
            return None
        art = Artifact.from_dict(json.loads(meta.read_text()))  # its path is relative to the entry
        art = replace(art, path=entry / art.path)
        return art if art.path.exists() else None

    def _convert(self, conv: Converter, src: Artifact, options: dict[str, Any], ctx: ConvertContext, key: str,
                 entry: Path | None) -> tuple[Artifact, bool]:
        if entry is not None:
            tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
        else:
            if self._scratch is None:
                self._scratch = Path(tempfile.mkdtemp(prefix="portability-nocache-", dir=self._scratch_parent))
            entry = self._scratch / key
            tmp = self._scratch / f".{key}.tmp"
            tmp.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        try:
            art = conv.convert(src, tmp, options, ctx)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        rel = art.path.relative_to(tmp)
        sha = sha256_files(sorted(p for p in tmp.rglob("*") if p.is_file() and not is_meta(p)))
        meta = dict(art.meta)
        meta.setdefault("convert_s", round(time.perf_counter() - t0, 3))
        meta.setdefault("converter", f"{conv.name()} {conv.version()}")
        size = Artifact(path=tmp / rel, format=art.format, sha256=sha, meta=meta).size_info()  # measured once
        final = Artifact(path=entry / rel, format=art.format, sha256=sha, meta=meta, size=size)
        write_meta(Artifact(path=rel, format=art.format, sha256=sha, meta=meta, size=size), tmp)
        try:
            os.rename(tmp, entry)
        except OSError:  # another process won the race: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
        return final, False


def convert_context(job, feeds: dict[str, np.ndarray]) -> ConvertContext:
    """What a job's converters get (``core.protocol.Job``; ``feeds``: its calibration feeds, else its feeds), the
    calibration samples' source as the check says it (``engine/prepare.py``: "dataset", "file" or "synthesized")."""
    samples = {k: v.reshape((v.shape[0] * v.shape[1],) + v.shape[2:]) if v.ndim >= 2 else v for k, v in feeds.items()}
    source = getattr(job, "calibration_source", "") or job.feeds_source
    return ConvertContext(calibration=samples, calibration_source=source, timeout_s=job.convert_timeout_s,
                          input_shapes=job.input_shapes or None, signature=job.signature)


def conversion_pool(job) -> str:
    """The worker pool a job's conversions need (``Converter.pool``): that of its first step that is not in the
    cache and has one, or of any later step (its input is not there yet) — TensorFlow's where one of those steps
    imports it (the costliest import: a PyTorch program's ONNX export followed by onnx2tf forks from it) —, else ""
    (all cached, or no step imports anything heavy)."""
    steps = _steps(job)
    if not any(conv.pool for conv in steps):
        return ""
    pools = [conv.pool for conv in steps[_ahead(job)[0]:] if conv.pool]
    return "tensorflow" if "tensorflow" in pools else next(iter(pools), "")


def conversions_ahead(job) -> tuple[set[str], str | None]:
    """The worker pools of every step of a job's conversions still to make (``conversion_pool``), and why the first
    of them has nothing to do for the model, where the cache remembers that (``NotApplicable``): the target is
    skipped then, as its worker would be."""
    made, why = _ahead(job)
    return {conv.pool for conv in _steps(job)[made:] if conv.pool}, why


def failure_note(entry: Path) -> Path:
    """Where a cache entry's failed conversion is noted (``Cache._remember_failure``)."""
    return entry.parent / f".{entry.name}.failed.json"


def not_applicable(entry: Path) -> str | None:
    """Why the conversion of this cache entry has nothing to do for its model, where a worker found so."""
    try:
        return json.loads(failure_note(entry).read_text()).get("not_applicable")
    except (OSError, ValueError, AttributeError):
        return None


def _steps(job) -> list[Converter]:
    from portability.core.target import load_class

    return [load_class(path)() for path, _ in job.target.converters]


def _ahead(job) -> tuple[int, str | None]:
    """How many of a job's steps are in the cache, up to the first missing one (its output is the later steps'
    input, not there yet), and why that one has nothing to do for the model, where a worker found so. Read-only:
    it walks the cache's entries as the worker will."""
    cache = Cache(Path(job.cache_dir) if job.cache_dir else None, use=job.use_cache)
    if not cache.use:
        return 0, None
    ctx = convert_context(job, _feeds(job.calibration or job.feeds, tuple(job.input_names)))
    art = job.source
    for i, ((_path, options), conv) in enumerate(zip(job.target.converters, _steps(job))):
        key = cache_key(art, conv, options, ctx)
        entry = cache.root / "artifacts" / key[:2] / key
        art = cache._cached(entry)
        if art is None:
            return i, not_applicable(entry)
    return len(job.target.converters), None


@functools.lru_cache(maxsize=4)
def _feeds(path: str, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """A check's feeds, read once for all its targets' ``conversion_pool`` (a check writes them once)."""
    from portability.core.protocol import load_feeds

    return load_feeds(Path(path), names)

