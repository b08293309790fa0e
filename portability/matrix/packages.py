"""The packages ``--versions`` takes (a literal registry), the versions this environment has, and the flag
read into {package: [versions]}."""
from __future__ import annotations

from dataclasses import dataclass

from portability.core.errors import UsageError


@dataclass(frozen=True)
class Package:
    name: str  # as the user names it, and as runtimes/converters declare it in ``uses``
    kind: str  # "pip" | "npm"
    dist: str  # the pip distribution or npm package installed
    #: npm packages of the same release train that move with it (onnxruntime-web needs its -common)
    companions: tuple[str, ...] = ()


#: every package ``--versions`` takes (a literal registry)
PACKAGES = {
    "onnxruntime": Package("onnxruntime", "pip", "onnxruntime"),
    "tensorflow": Package("tensorflow", "pip", "tensorflow-cpu"),
    "ai-edge-litert": Package("ai-edge-litert", "pip", "ai-edge-litert"),
    "onnx2tf": Package("onnx2tf", "pip", "onnx2tf"),
    "tensorflowjs": Package("tensorflowjs", "pip", "tensorflowjs"),
    "onnxruntime-web": Package("onnxruntime-web", "npm", "onnxruntime-web", ("onnxruntime-common",)),
    "@tensorflow/tfjs": Package("@tensorflow/tfjs", "npm", "@tensorflow/tfjs"),
}


def parse(specs: list[str] | None) -> dict[str, list[str]]:
    """``["onnxruntime=1.20.1,1.31.1", ...]`` -> {package: [versions]}; a UsageError names what is wrong."""
    out: dict[str, list[str]] = {}
    for spec in specs or []:
        for part in [spec] if "=" in spec else []:
            name, _, vs = part.partition("=")
            name = name.strip()
            if name not in PACKAGES:
                raise UsageError(f"--versions: unknown package '{name}' (known: {', '.join(PACKAGES)})")
            versions = [v.strip() for v in vs.split(",") if v.strip()]
            if not versions:
                raise UsageError(f"--versions {name}=: give at least one version (e.g. {name}=1.20.1,1.31.1)")
            out.setdefault(name, []).extend(v for v in versions if v not in out.get(name, []))
        if "=" not in spec:
            raise UsageError(f"--versions must look like PACKAGE=V1,V2 (e.g. onnxruntime=1.20.1,1.31.1), got '{spec}'")
    return out


def installed(pkg: Package) -> str | None:
    """The version this environment has (the harness's node_modules for a browser package)."""
    if pkg.kind == "npm":
        from portability.web.paths import package_version

        v = package_version(pkg.dist)
        return None if v == "absent" else v
    from importlib.metadata import PackageNotFoundError, version

    for dist in (pkg.dist, pkg.name):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None
