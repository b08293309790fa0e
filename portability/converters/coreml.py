"""Core ML (``.mlpackage``, an ML program) by Core ML Tools, from a PyTorch program or a SavedModel: what the
iOS route ships. Core ML Tools converts on Linux; Core ML itself predicts only on Apple platforms, so
``mobile/coreml`` reports the conversion (status, the op it failed on, size) and never a run here.

- ``CoremlFromTorch``: the ``torch.export`` program (opened vetted: nothing unpickled), decomposed to the
  ATen dialect (``run_decompositions``, which Core ML Tools requires), converted for iOS 17.
- ``CoremlFromSavedModel``: the SavedModel's ``serving_default`` function (a Keras export, a SavedModel
  source, or onnx2tf's from ONNX) through Core ML Tools' TensorFlow frontend.

Core ML Tools' defaults are kept, as a user gets them: an ML program computing in float16.
``meta["ops"]`` counts the ML program's operations by type.
"""
from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version, require
from portability.converters.onnx2tf import plain_saved_model
from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import ConvertError

_HINT = {"coremltools": install("coreml")}
#: Core ML Tools' messages that name the op it cannot convert
_OP = (re.compile(r"Unsupported fx node (\w+)"), re.compile(r"convert function for op '(\w+)' not implemented"),
       re.compile(r"Conversion for TF op '(\w+)' not implemented"), re.compile(r"converting '(\w+)' op"))


def _failed(what: str, e: Exception) -> ConvertError:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = f"Core ML Tools could not convert the {what}: {type(e).__name__}: " + " | ".join(lines[:3])[:500]
    op = next((m.group(1) for p in _OP for m in [p.search(msg)] if m), None)
    return ConvertError(msg, op=op)


def _import_ct():
    """Core ML Tools, imported with PyTorch hidden (``converters/torchless``) unless PyTorch is imported already (a
    PyTorch program's conversion): a SavedModel's conversion then goes without PyTorch's and torchao's import
    (5-9 s), to the same program and weights."""
    from portability.converters.torchless import torch_hidden

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with torch_hidden():
        import coremltools as ct
    return ct


def _saved(mlmodel, out_dir: Path, meta: dict) -> Artifact:
    package = out_dir / "model.mlpackage"
    mlmodel.save(str(package))
    try:
        ops = Counter(op.op_type for op in mlmodel._mil_program.functions["main"].operations)
        meta["ops"] = dict(sorted(ops.items()))
    except Exception:  # noqa: BLE001 — an op count is a detail; the package is what matters
        pass
    meta["compute_precision"] = "float16 (Core ML Tools' default for ML programs)"
    return Artifact(path=package / "Manifest.json", format="coreml", sha256="", meta=meta)


class CoremlFromTorch(Converter):
    input_format = "torch"
    output_format = "coreml"
    uses = ("coremltools",)
    requires = {"torch": install("torch"), **_HINT}
    pool = "torch"  # it imports PyTorch: its worker forks from the pool that imported it
    uses_shapes = True

    def version(self) -> str:
        return f"2+coremltools{package_version('coremltools')}+torch{package_version('torch')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        require(self.requires, "to convert to Core ML")
        import torch

        from portability.converters.torch_onnx import _example, _message, _open

        ep = _open(src)
        try:
            if ctx.input_shapes:
                ep = torch.export.export(ep.module(), _example(ctx))
            ep = ep.run_decompositions({})
        except Exception as e:
            raise ConvertError(f"torch.export for Core ML failed: {_message(e)}") from None
        ct = _import_ct()
        try:
            mlmodel = ct.convert(ep, minimum_deployment_target=ct.target.iOS17, convert_to="mlprogram")
        except Exception as e:
            raise _failed("PyTorch program", e) from None
        return _saved(mlmodel, out_dir, {"onnx_signature": ctx.signature,
                                         "produced_by": f"coremltools {ct.__version__} from torch.export (iOS 17 ML program)"})


class CoremlFromSavedModel(Converter):
    input_format = "saved_model"
    output_format = "coreml"
    pool = "tensorflow"  # it imports TensorFlow: its worker forks from the pool that imported it
    uses = ("coremltools",)
    requires = {"tensorflow": install("tensorflow"), **_HINT}
    cost = 2

    def version(self) -> str:
        return f"2+coremltools{package_version('coremltools')}+tf{package_version('tensorflow-cpu')}"

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        require(self.requires, "to convert to Core ML")
        ct = _import_ct()
        import tensorflow as tf

        with tempfile.TemporaryDirectory(prefix="portability-coreml-") as tmp:
            sm = plain_saved_model(src, Path(tmp) / "saved_model", ctx)  # Core ML Tools has no Erfc
            try:
                loaded = tf.saved_model.load(str(sm.folder))  # held while converting: its function reads its variables
                fn = loaded.signatures["serving_default"]
            except Exception as e:
                raise ConvertError(f"the SavedModel has no serving_default signature to convert: {type(e).__name__}: {e}"[:500]) from None
            try:
                mlmodel = ct.convert([fn], source="tensorflow", minimum_deployment_target=ct.target.iOS17, convert_to="mlprogram")
            except Exception as e:
                raise _failed("SavedModel", e) from None
            del loaded
        return _saved(mlmodel, out_dir, {"onnx_signature": src.meta.get("onnx_signature") or ctx.signature,
                                         "produced_by": f"coremltools {ct.__version__} from the SavedModel's serving_default "
                                                        "(iOS 17 ML program)"})
