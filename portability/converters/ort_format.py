"""OrtFromOnnx: the ONNX model in ORT format (``.ort``), what ONNX Runtime Mobile loads on a phone.

Runs ``python -m onnxruntime.tools.convert_onnx_models_to_ort`` (``Fixed`` optimizations for
``--target_platform arm``, the phone's) on a copy, and records ORT Mobile's static NNAPI / CoreML
coverage — the analysis of ``python -m onnxruntime.tools.check_onnx_model_mobile_usability`` (nodes
covered, partitions, verdict per execution provider) — in ``meta["mobile_usability"]``. That analysis
needs fixed shapes: symbolic dimensions are fixed on a private copy first, with
``make_dynamic_shape_fixed``'s helpers, and the fixed shapes are recorded. A model with dynamic input dims
is converted at the check's static shapes (``ctx.input_shapes``, recorded as ``fixed_shapes``), as
``make_dynamic_shape_fixed`` prepares a model for ORT Mobile.

Options: ``fix_shapes`` (bool, default False): fix dynamic dims (to 1) even without ``ctx.input_shapes``.
"""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version
from portability.converters.shapes import fix_input_shapes
from portability.core.artifact import Artifact
from portability.core.errors import ConvertError

log = logging.getLogger(__name__)
_EPS = {"nnapi": None, "coreml_neuralnetwork": "coreml_supported_neuralnetwork_ops.md",
        "coreml_mlprogram": "coreml_supported_mlprogram_ops.md"}


def mobile_usability(model_path: Path) -> dict[str, Any]:
    """NNAPI / CoreML partitioning of a fixed-shape model, as check_onnx_model_mobile_usability computes it."""
    from onnxruntime.tools.mobile_helpers import usability_checker as uc
    from onnxruntime.tools.onnx_model_utils import ModelProtoWithShapeInfo, optimize_model

    with tempfile.TemporaryDirectory() as tmp:
        opt = Path(tmp) / "optimized.onnx"
        optimize_model(model_path, opt, use_external_initializers=True)  # BASIC, as ORT format conversion does
        model = ModelProtoWithShapeInfo(opt).model_with_shape_info
        out: dict[str, Any] = {}
        for ep, cfg in _EPS.items():
            info = uc.check_nnapi_partitions(model, True) if cfg is None else uc.check_coreml_partitions(model, True, cfg)
            out[ep] = {
                "nodes": info.num_nodes,
                "supported_nodes": info.num_supported_nodes,
                "coverage": round(info.num_supported_nodes / info.num_nodes, 4) if info.num_nodes else None,
                "partitions": info.num_partitions,
                "partition_sizes": [len(g) for g in info.supported_groups],
                "unsupported_ops": sorted(info.unsupported_ops),
                "verdict": info.suitability().name,  # YES | MAYBE | NO: worth trying the EP on a phone
            }
    return out


def _initializer_inputs(path: Path) -> list[str]:
    import onnx

    g = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in g.initializer}
    return [i.name for i in g.input if i.name in inits]


class OrtFromOnnx(Converter):
    output_format = "ort"
    uses_calibration = False
    uses = ("onnxruntime",)
    uses_shapes = True

    def version(self) -> str:
        return "1+onnxruntime" + package_version("onnxruntime")

    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        meta: dict[str, Any] = {"target_platform": "arm", "optimization_style": "Fixed"}
        with tempfile.TemporaryDirectory(prefix="portability-ort-") as tmp:
            work = Path(tmp)
            fixed_model = work / "fixed" / "model.onnx"
            fixed_model.parent.mkdir()
            try:
                fixed = fix_input_shapes(src.path, fixed_model, self.shapes_used(ctx))
            except Exception as e:
                raise ConvertError(f"fixing dynamic shapes failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
            meta["shapes_fixed_for_usability_check"] = fixed
            try:
                meta["mobile_usability"] = mobile_usability(fixed_model)
            except Exception as e:  # an analysis, not the conversion: keep going, say why it is missing
                log.warning("mobile usability check failed: %s", e)
                meta["mobile_usability"] = {"error": (str(e).splitlines() or [type(e).__name__])[0][:300]}
            model = work / "in" / "model.onnx"
            model.parent.mkdir()
            if (options.get("fix_shapes") or self.shapes_used(ctx)) and fixed:
                shutil.copyfile(fixed_model, model)
                meta["fixed_shapes"] = fixed
            else:
                shutil.copyfile(src.path, model)
            meta["initializer_inputs"] = _initializer_inputs(model)
            cmd = [sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort", str(model),
                   "--output_dir", str(work / "out"), "--optimization_style", "Fixed", "--target_platform", "arm"]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               timeout=ctx.timeout_s)
            ort_file = work / "out" / "model.ort"
            if p.returncode != 0 or not ort_file.is_file():
                lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
                errs = [ln for ln in lines if "Error" in ln or "Fail" in ln or "error" in ln] or lines[-4:]
                raise ConvertError("ORT format conversion failed: " + " | ".join(errs[-4:])[:800])
            shutil.move(str(ort_file), str(out_dir / "model.ort"))
            cfg = work / "out" / "model.required_operators.config"
            if cfg.is_file():
                meta["required_operators"] = [ln for ln in cfg.read_text().splitlines() if ln and not ln.startswith("#")]
        return Artifact(path=out_dir / "model.ort", format="ort", sha256="", meta=meta)
