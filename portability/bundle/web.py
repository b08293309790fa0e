"""``portability bundle MODEL --targets web -o DIR``: a static folder that runs the web targets in any browser.

A normal check of the model (the reference and the web targets) converts each target's model into the
artifact cache and keeps the reference's outputs. The folder then holds, served as files:

    index.html, bundle.mjs          the page and its driver (``bundle/page``)
    h/                              the harness page and modules (``web/harness``), unchanged: one frame per target
    m/<package>/...                 the npm files the engines load (from ``platforms/web/node_modules``)
    a/<slug>/                       each target's model files, its feeds in the page's layout
                                    (``feeds.bin``) and the reference's outputs in that layout (``reference.bin``)
    manifest.json                   model name and sha256, inputs digest, reference id, per target its
                                    page configuration, tensors, thresholds, timing plan and what its
                                    page's info says when the backend asked for ran (``accepts``)

What a target's page needs of its engine (its npm files, its page configuration, how its outputs map to the
reference's) is asked of the target's runtime class (``runtimes/web.py``), never decided here by its name.

The driver runs the harness steps Python uses (``setup``, ``inferMany``, ``time``), compares in the page
and offers ``result.json`` (``bundle/ingest.py`` reads it back).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from portability.core.errors import TargetError, UsageError
from portability.core.status import COMPARED

PAGE_DIR = Path(__file__).resolve().parent / "page"
MANIFEST = "manifest.json"
RESULT_KIND = "portability-web-result"
FORMAT_VERSION = 1
#: timed runs per target in the page (after the harness's own warm-up)
TIMED_RUNS = 20
WARMUP_RUNS = 5


@dataclass(frozen=True)
class Bundled:
    """What ``build`` wrote: the folder, its manifest and the check report the bundle came from."""
    folder: Path
    manifest: dict
    report: Any
    skipped: tuple[str, ...]


def slug(tid: str) -> str:
    return tid.replace("/", "-")


class _Blobs:
    """Stands in for the harness server where a runtime's ``page_config`` puts a blob (``static_config``):
    the blob becomes a file of the bundle and its URL a path relative to the page."""

    def __init__(self, folder: Path):
        self.folder = folder

    def put_blob(self, name: str, data: bytes) -> str:
        (self.folder / "a" / name).write_bytes(data)
        return f"a/{name}"


def _artifact(cache_root: Path, sha256: str, fmt: str, meta: dict | None):
    """The cache entry holding the artifact a target ran (by content digest and format; its converter's
    metadata when several entries hold the same content)."""
    from portability.core.artifact import META_FILE, Artifact

    found = []
    for f in sorted((cache_root / "artifacts").glob(f"*/*/{META_FILE}")):
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if d.get("sha256") == sha256 and d.get("format") == fmt:
            art = Artifact.from_dict(d)
            found.append(Artifact(path=f.parent / art.path, format=art.format, sha256=art.sha256, meta=art.meta))
    found.sort(key=lambda a: a.meta != (meta or a.meta))
    return found[0] if found else None


def page_reference(runtime, ref: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference's outputs ([batch, ...] per ONNX name) as the page gives them: its keys, its layout
    (the runtime's ``page_outputs``, the inverse of its ``from_page``, checked by applying ``from_page`` back)."""
    nb = len(next(iter(ref.values())))
    pages = []
    for b in range(nb):
        try:
            page = runtime.page_outputs({k: v[b] for k, v in ref.items()})
        except TargetError as e:
            raise UsageError(str(e)) from None
        back = runtime.from_page(page)
        for name, r in ref.items():
            if name in back and not np.array_equal(np.asarray(back[name]).astype(r[b].dtype), r[b]):
                raise UsageError(f"output '{name}': the page layout of the reference does not map back to it")
        pages.append(page)
    return {k: np.stack([p[k] for p in pages]) for k in (pages[0] if pages else {})}


def _write_tensors(path: Path, batches: list[dict[str, np.ndarray]]) -> list[list[dict]]:
    """One blob of every batch's tensors; the harness's descriptors (name, dtype, shape, offset, nbytes)."""
    descs, offset = [], 0
    with open(path, "wb") as f:
        for tensors in batches:
            row = []
            for name, a in tensors.items():
                a = np.ascontiguousarray(a)
                b = a.astype(np.uint8).tobytes() if a.dtype == bool else a.tobytes()
                row.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape), "offset": offset, "nbytes": len(b)})
                f.write(b)
                offset += len(b)
            descs.append(row)
    return descs


def _target(folder: Path, target, result, ref: dict[str, np.ndarray], batches: list[dict], cache_root: Path) -> dict:
    """Copy one target's model, write its feeds and reference; its manifest entry."""
    from portability.core.target import load_class

    art = _artifact(cache_root, result.artifact["sha256"], result.artifact["format"], (result.details or {}).get("artifact_meta"))
    if art is None:
        raise UsageError(f"{target.id}: its converted model is not in the artifact cache {cache_root}")
    runtime = load_class(target.runtime)(dict(target.options))
    config = runtime.static_config(art, _Blobs(folder))
    name = slug(target.id)
    dest = folder / "a" / name
    dest.mkdir(parents=True)
    for f in art.files():
        (dest / f.relative_to(art.folder)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / f.relative_to(art.folder))
    feeds = _write_tensors(dest / "feeds.bin", [runtime.to_page(b) for b in batches])
    refs = page_reference(runtime, ref)
    (out_descs,) = _write_tensors(dest / "reference.bin", [refs])
    onnx_of = runtime.page_output_names()
    for d in out_descs:
        a = refs[d["name"]].astype(np.float64)
        d["onnx"] = onnx_of.get(d["name"], d["name"])
        d["ref_max_abs"] = float(np.abs(a[np.isfinite(a)]).max()) if np.isfinite(a).any() else 0.0
    t = result.thresholds or {}
    return {"id": target.id, "slug": name, "engine": runtime.engine, "config": config,
            "model": f"a/{name}/{art.path.relative_to(art.folder).as_posix()}",
            "npm": runtime.npm_files(config), "accepts": runtime.accepts(runtime.options),
            "feeds": {"url": f"a/{name}/feeds.bin", "batches": feeds},
            "reference": {"url": f"a/{name}/reference.bin", "outputs": out_descs},
            "thresholds": {"max_abs": t.get("max_abs"), "cosine": t.get("cosine")},
            "timing": {"warmup": WARMUP_RUNS, "runs": TIMED_RUNS},
            "check_status": str(result.status)}


def _copy_page(folder: Path, npm: list[str]) -> None:
    from portability.web.paths import HARNESS_DIR, modules_dir

    shutil.copytree(HARNESS_DIR, folder / "h", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("index.html", "bundle.mjs"):
        shutil.copy2(PAGE_DIR / f, folder / f)
    root = modules_dir()
    for rel in dict.fromkeys(npm):
        src = root / rel
        if not src.is_file():
            raise UsageError(f"npm file {rel} is not installed in {root}")
        (folder / "m" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, folder / "m" / rel)


@dataclass(frozen=True)
class Checked:
    """An ordinary check of a model for a bundle: the chosen targets, the report, the reference's outputs
    and the inputs made again as the check made them (one dict per batch)."""
    opts: Any
    chosen: list
    report: Any
    kept: dict
    feeds: Any
    batches: list
    ref: dict
    cache_root: Path


def checked(model: Path, targets: str, folder: Path, platform: str, **options: Any) -> Checked:
    """Check ``model`` on its reference and the ``platform`` targets of ``targets`` (``folder``, the bundle's,
    must be empty or absent; it is created)."""
    from portability import api
    from portability.core import inputs as inp
    from portability.core.dirs import default_root
    from portability.engine.pipeline import check
    from portability.report.golden import digest
    from portability.sources import load_source_isolated
    from portability.targets import expand

    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise UsageError(f"{folder} is not empty: give a new or empty folder for the bundle")
    opts = api.options(targets, **options)
    chosen = [t for t in expand(opts.targets) if t.platform == platform]
    if not chosen:
        raise UsageError(f"--targets {targets} names no {platform} target")
    info = load_source_isolated(model, sandbox=opts.sandbox, shapes=opts.shapes)
    kept: dict = {}
    report = check(model, opts, model=info, kept=kept)
    feeds = inp.prepare(info, opts)
    if digest(feeds.arrays) != kept["inputs"]["digest"]:
        raise UsageError("the inputs could not be made again as the check made them: give them with --inputs")
    folder.mkdir(parents=True, exist_ok=True)
    return Checked(opts, chosen, report, kept, feeds, [feeds.batch(i) for i in range(feeds.batches)],
                   kept["outputs"][report.reference], Path(opts.cache_dir) if opts.cache_dir else default_root())


def not_run(tid: str, r) -> str | None:
    """Why a target of the check cannot be bundled (it did not run to outputs here), else None."""
    if r is None or r.status not in COMPARED or not r.artifact:
        return f"{tid} ({r.status if r else 'absent'}: {(r.error or '').splitlines()[0] if r and r.error else 'did not run here'})"
    return None


def build(model: Path, targets: str, folder: Path, **options: Any) -> Bundled:
    """Check ``model`` on its reference and the web ``targets``, then write the bundle to ``folder`` (which
    must be empty or absent). Targets that did not run to outputs here are left out (``skipped``)."""
    folder = Path(folder)
    c = checked(model, targets, folder, "web", **options)
    report, kept, feeds = c.report, c.kept, c.feeds
    (folder / "a").mkdir()
    entries, skipped = [], []
    for t in c.chosen:
        r = report.target(t.id)
        why = not_run(t.id, r)
        if why:
            skipped.append(why)
            continue
        entries.append(_target(folder, t, r, c.ref, c.batches, c.cache_root))
    if not entries:
        raise UsageError("no web target ran here to outputs: nothing to bundle (" + "; ".join(skipped) + ")")
    _copy_page(folder, [f for e in entries for f in e.pop("npm")])
    manifest = {"kind": "portability-web-bundle", "version": FORMAT_VERSION, "result_kind": RESULT_KIND,
                "model": {"name": Path(model).name, "sha256": report.model.get("sha256")},
                "inputs": {"digest": kept["inputs"]["digest"], "batches": feeds.batches},
                "reference": report.reference, "created_at": report.created_at, "targets": entries}
    write_manifest(folder, manifest)
    return Bundled(folder, manifest, report, tuple(skipped))


def write_manifest(folder: Path, manifest: dict) -> None:
    """``manifest.json``, with its ``id``: the digest of the rest."""
    text = json.dumps(manifest, indent=1, sort_keys=True)
    manifest["id"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
