"""``portability doctor``: each platform's readiness here, what is missing, and the one command that fixes it.

Cheap: the targets' own availability checks (``find_spec`` and file tests, each target's whole route from an ONNX
source) and ``find_spec`` for the extras; no framework is imported."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import typer


@dataclass(frozen=True)
class Part:
    """One line of the doctor: a platform or an optional part, judged by the availability of ``targets`` (ids of
    the registry) and the presence of ``modules`` (each with the command that installs it)."""

    name: str
    what: str
    targets: tuple[str, ...] = ()
    modules: tuple[tuple[str, str], ...] = ()


def _parts() -> tuple[Part, ...]:
    from portability.core.availability import install

    tf = install("tensorflow")
    return (
        Part("server", "ONNX Runtime on the CPU (server/ort-*)", ("server/ort-cpu",)),
        Part("web", "ONNX Runtime Web in headless Chromium (web/ort-*)", ("web/ort-wasm",)),
        Part("tfjs", "TensorFlow.js and LiteRT.js in the browser (web/tfjs-*, web/litert-js)", ("web/tfjs-wasm",)),
        Part("mobile", "LiteRT through onnx2tf (mobile/tflite-*), ORT Mobile (mobile/ort-mobile)",
             ("mobile/tflite-fp32", "mobile/ort-mobile")),
        Part("arm64", "the ARM64 builds under qemu emulation (mobile/arm64-*)", ("mobile/arm64-ort",)),
        Part("tensorflow", "Keras and SavedModel sources, server/tf, tf2onnx",
             modules=(("tensorflow", tf), ("keras", tf), ("tf2onnx", tf), ("h5py", tf))),
        Part("torch", "torch.export sources, server/torch, the PyTorch -> ONNX exporters",
             modules=(("torch", install("torch")), ("onnxscript", install("torch")), ("onnx_ir", install("torch")))),
        Part("executorch", "ExecuTorch (mobile/executorch-*, PyTorch sources)", ("mobile/executorch-xnnpack",)),
        Part("openvino", "OpenVINO on the CPU (server/openvino)", ("server/openvino",)),
        Part("coreml", "Core ML Tools' conversions (mobile/coreml, convert-only)",
             modules=(("coremltools", install("coreml")),)),
        Part("gpu", "ONNX Runtime's CUDA provider (server/ort-cuda)", ("server/ort-cuda",)),
        Part("mxnet", "MXNet checkpoints (server/mxnet, its own environment)", ("server/mxnet",)),
        Part("report", "the HTML report's plots", modules=(("matplotlib", install("report")),)),
    )


@dataclass(frozen=True)
class Finding:
    name: str
    what: str
    ready: bool
    missing: str | None = None
    fix: str | None = None

    def to_dict(self) -> dict:
        return {"platform": self.name, "what": self.what, "ready": self.ready, "missing": self.missing, "fix": self.fix}


def examine(part: Part, registry: dict) -> Finding:
    """The one function that decides a part's readiness: its first missing module, else its first target that
    cannot run (its reason and hint), else ready."""
    import importlib.util

    from portability.targets import availability

    for mod, fix in part.modules:
        if importlib.util.find_spec(mod) is None:
            return Finding(part.name, part.what, False, f"Python package '{mod}' is not installed", fix)
    for tid in part.targets:
        a = availability(registry[tid])
        if not a.ok:
            return Finding(part.name, part.what, False, f"{tid}: {a.reason}", a.hint)
    if part.name == "gpu":
        from portability.core.availability import install, package_version

        if package_version("onnxruntime-gpu") == "absent":
            return Finding(part.name, part.what, False, "onnxruntime-gpu is not installed (onnxruntime's CPU build "
                           "has no CUDA provider)", install("gpu"))
    return Finding(part.name, part.what, True)


def doctor(
    platforms: Optional[List[str]] = typer.Argument(None, help="Only these platforms or parts (default: all)."),
    json_out: bool = typer.Option(False, "--json", help="Print as JSON."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when one of them is not ready (for CI)."),
) -> int:
    """Say, for each platform and optional part, whether it is ready here, what is missing, and the one command that
    fixes it. Exit 0 (unless --strict)."""
    import json

    from portability.core.errors import UsageError
    from portability.targets import registry

    parts = _parts()
    known = [p.name for p in parts]
    unknown = [n for n in platforms or () if n not in known]
    if unknown:
        raise UsageError(f"unknown platform {', '.join(unknown)} (known: {', '.join(known)})")
    reg = registry()
    found = [examine(p, reg) for p in parts if not platforms or p.name in platforms]
    if json_out:
        print(json.dumps([f.to_dict() for f in found], indent=2))
    else:
        width = max(len(f.name) for f in found)
        for f in found:
            line = f"{f.name:<{width}}  ready" if f.ready else f"{f.name:<{width}}  not ready: {f.missing}"
            typer.echo(line + (f" — fix: {f.fix}" if f.fix and not f.ready else ""))
        typer.echo(f"{sum(f.ready for f in found)} of {len(found)} ready")
    return 1 if strict and not all(f.ready for f in found) else 0
