"""The ONNX export a check's route makes of a source that is not ONNX (a ``.pt2``'s torch.onnx export, a Keras
model's tf2onnx export…), for the tools that work on an ONNX graph (``localize``).

The export is made as a check makes it — the same converters, in the same isolated, sandboxed workers,
through the cache — by a check of the source on ``server/ort-cpu``; the file is then the cache entry whose
content digest that check reports. Only a target whose own route passes through ONNX is localized on it
(its chain starts from that very file); a route that avoids ONNX (litert-torch's TFLite, ExecuTorch, Keras's
own TFLite) is refused in one line.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

from portability.core.errors import UsageError
from portability.core.status import Status


def _find(cache_root: Path, sha256: str) -> Path | None:
    """The cached ONNX artifact whose content digest is ``sha256``."""
    for meta in (cache_root / "artifacts").glob("*/*/artifact.json"):
        try:
            a = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if a.get("sha256") == sha256 and a.get("format") == "onnx":
            return meta.parent / a["path"]
    return None


def onnx_export(model_path: Path, info, target, opts, say: Callable[[str], None] = lambda s: None) -> tuple[Path, str]:
    """(the ONNX file, how it was made) for a non-ONNX source whose ``target`` route passes through ONNX."""
    from portability.core.dirs import default_root
    from portability.engine.pipeline import check as run_check
    from portability.engine.plan import NoRoute, plan

    try:
        p = plan(info.format, target, opts.via)
    except NoRoute as e:
        raise UsageError(f"{target.id}: {e}") from None
    if "onnx" not in p.route:
        raise UsageError(f"localize cuts an ONNX graph: {target.id}'s route from a {info.format} model avoids ONNX "
                         f"({' -> '.join(p.route)}), so no ONNX graph is what it runs")
    say(f"the {info.format} model's ONNX export, as a check makes it")
    o = dataclasses.replace(opts, targets="server/ort-cpu", runs=0, robustness=False, versions={}, localize=None, fix=False,
                            inputs=None, dataset=None)
    report = run_check(model_path, o)
    t = next((x for x in report.targets if x.id == "server/ort-cpu"), None)
    if t is None or not t.artifact or t.status in (Status.CONVERT_ERROR, Status.SKIPPED):
        raise UsageError(f"the {info.format} model has no ONNX export to localize on: "
                         f"{(t.error if t else None) or 'server/ort-cpu did not run'}")
    path = _find(Path(opts.cache_dir) if opts.cache_dir else default_root(), t.artifact["sha256"])
    if path is None or not path.is_file():
        raise UsageError("the ONNX export is not in the cache (run with the cache on: no --no-cache)")
    steps = [c["converter"].split()[0] for c in (t.details or {}).get("conversions", [])]
    return path, f"the check's ONNX export ({' -> '.join(steps)}); the reference is ONNX Runtime on that export"
