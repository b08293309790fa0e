"""Snapshots of the non-ONNX sources: the first step of every chain from such a source (see
``onnx_snapshot`` for ONNX). Each copies the source into the cache (later steps never touch the user's
files) and records what the runtimes need to speak the source's names and layout:
``meta["onnx_signature"]`` (the **source's** signature: for every source kind the runtimes' contract is
its names and layout, the key keeps its historical name), plus the tensor mapping of its format
(``tflite_io`` for a SavedModel or a ``.tflite``, ``tfjs_io`` for a TF.js graph model), all identity
layouts: the source *is* the reference layout.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version
from portability.core.artifact import Artifact
from portability.core.errors import ConvertError


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy a source folder's files (the source reader refused links that leave it)."""
    for p in sorted(src.rglob("*")):
        if p.is_file() and p.name != "artifact.json":
            (dst / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dst / p.relative_to(src))


def _sig(ctx: ConvertContext) -> dict:
    if not ctx.signature:
        raise ConvertError("no source signature in the job")
    return ctx.signature


class _FileSnapshot(Converter):
    """A one-file source (``.keras``, ``.pt2``) copied as it is, with the source's signature."""

    snapshot = True
    file_name = ""

    def version(self) -> str:
        return "1"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        out = out_dir / self.file_name
        shutil.copyfile(src.path, out)
        return Artifact(path=out, format=self.output_format, sha256="", meta={"onnx_signature": _sig(ctx)})


class KerasFromKeras(_FileSnapshot):
    input_format = output_format = "keras"
    file_name = "model.keras"


class TorchFromTorch(_FileSnapshot):
    input_format = output_format = "torch"
    file_name = "model.pt2"


class SavedModelFromSavedModel(Converter):
    input_format = output_format = "saved_model"
    snapshot = True
    pool = "tensorflow"  # it imports TensorFlow: its worker forks from the pool that imported it

    def version(self) -> str:
        return f"1+tf{package_version('tensorflow-cpu')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from portability.converters.savedmodel_io import savedmodel_io

        _copy_tree(src.folder, out_dir)
        sig = _sig(ctx)
        return Artifact(path=out_dir / "saved_model.pb", format="saved_model", sha256="",
                        meta={"onnx_signature": sig, "tflite_io": savedmodel_io(out_dir, sig), "produced_by": "given"})


class TfliteFromTflite(Converter):
    input_format = output_format = "tflite"
    snapshot = True

    def version(self) -> str:
        return f"1+litert{package_version('ai-edge-litert')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from portability.converters.tflite_layout import describe_tflite

        out = out_dir / "model.tflite"
        shutil.copyfile(src.path, out)
        sig = _sig(ctx)
        return Artifact(path=out, format="tflite", sha256="", meta={
            "onnx_signature": sig, "tflite_io": describe_tflite(out, sig, native=True), "produced_by": "given"})


class TfjsFromTfjs(Converter):
    input_format = output_format = "tfjs"
    snapshot = True

    def version(self) -> str:
        return "2"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        from portability.sources.tfjs import read, shards

        doc = read(src.path)
        shutil.copyfile(src.path, out_dir / "model.json")
        for f in shards(doc, src.folder):
            (out_dir / f.relative_to(src.folder.resolve())).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, out_dir / f.relative_to(src.folder.resolve()))
        sig = _sig(ctx)
        io = {"inputs": [{"onnx": t["name"], "key": t["name"], "node": doc["signature"]["inputs"][t["name"]]["name"].split(":")[0],
                          "shape": [d if d is not None else -1 for d in t["shape"]],
                          "dtype": {"int64": "int32"}.get(t["dtype"], t["dtype"]), "to_tfjs": None} for t in sig["inputs"]],
              "outputs": [{"onnx": t["name"], "key": t["name"], "to_onnx": None,
                           "node": ((doc.get("signature") or {}).get("outputs", {}).get(t["name"]) or {"name": t["name"]})["name"].split(":")[0]}
                          for t in sig["outputs"]]}
        ops = sorted({n["op"] for n in doc["modelTopology"].get("node", [])} - {"Const", "Placeholder", "Identity"})
        return Artifact(path=out_dir / "model.json", format="tfjs", sha256="", meta={
            "onnx_signature": sig, "tfjs_io": io, "ops": ops, "converted_by": doc.get("convertedBy"),
            "produced_by": "given"})
