"""OrtFromOnnx: the ONNX model in ORT format (``.ort``), what ONNX Runtime Mobile loads on a phone.

Runs ``python -m onnxruntime.tools.convert_onnx_models_to_ort`` (``Fixed`` optimizations for
``--target_platform arm``, the phone's; without PyTorch: ``ort_tools``) on a copy, and records ORT Mobile's static
NNAPI / CoreML coverage — the analysis of ``python -m onnxruntime.tools.check_onnx_model_mobile_usability`` (nodes
covered, partitions, verdict per execution provider) — in ``meta["mobile_usability"]``. That analysis
needs fixed shapes: symbolic dimensions are fixed on a private copy first, with
``make_dynamic_shape_fixed``'s helpers, and the fixed shapes are recorded. A model with dynamic input dims
is converted at the check's static shapes (``ctx.input_shapes``, recorded as ``fixed_shapes``), as
``make_dynamic_shape_fixed`` prepares a model for ORT Mobile.

Options: ``fix_shapes`` (bool, default False): fix dynamic dims (to 1) even without ``ctx.input_shapes``;
``dynamic`` (bool): keep them dynamic (a decoder that generates: ``check --generate``).
"""
from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from portability.converters.base import ConvertContext, Converter, package_version
from portability.converters.ort_tools import ort_tool, tool_command
from portability.converters.shapes import fix_input_shapes
from portability.core.artifact import Artifact
from portability.core.errors import ConvertError

log = logging.getLogger(__name__)
_EPS = {"nnapi": None, "coreml_neuralnetwork": "coreml_supported_neuralnetwork_ops.md",
        "coreml_mlprogram": "coreml_supported_mlprogram_ops.md"}


def mobile_usability(model_path: Path) -> dict[str, Any]:
    """NNAPI / CoreML partitioning of a fixed-shape model, as check_onnx_model_mobile_usability computes it."""
    uc, utils = ort_tool("mobile_helpers.usability_checker"), ort_tool("onnx_model_utils")
    with tempfile.TemporaryDirectory() as tmp:
        opt = Path(tmp) / "optimized.onnx"
        utils.optimize_model(model_path, opt, use_external_initializers=True)  # BASIC, as ORT format conversion does
        model = utils.ModelProtoWithShapeInfo(opt).model_with_shape_info
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


#: lines of the converter's log that are not its failure: ONNX Runtime's lenient shape merges are warnings
_NOT_ERRORS = ("Falling back to lenient merge",)


def _to_ort(model: Path, out: Path, timeout_s: float | None) -> tuple[Path, str | None]:
    """``convert_onnx_models_to_ort`` on ``model``: the ``.ort`` file, and the failure's lines (or None)."""
    cmd = tool_command("convert_onnx_models_to_ort", str(model), "--output_dir", str(out), "--optimization_style", "Fixed",
                       "--target_platform", "arm")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout_s)
    ort_file = out / "model.ort"
    if p.returncode == 0 and ort_file.is_file():
        return ort_file, None
    return ort_file, failure_line(p.stdout)


def failure_line(log_text: str) -> str:
    """The converter's own error from its log: the exception it ended with (ONNX Runtime's ``Fail: …``,
    less the C++ source location), else its error lines — never the shape-merge warnings before it."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip() and not any(w in ln for w in _NOT_ERRORS)]
    for ln in reversed(lines):
        m = re.match(r"^[\w.]+(?:Error|Fail|Exception)\w*: (.*)$", ln)
        if m:
            msg = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", m.group(1))
            return re.sub(r"/\S+\.(?:h|cc|cpp):\d+ (?:\S.*?\) )?(?:\[with [^\]]*\] )?", "", msg)[:800]
    errs = [ln for ln in lines if "Error" in ln or "Fail" in ln or "error" in ln] or lines[-4:]
    return " | ".join(errs[-4:])[:800]


def _dims(fixed: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in fixed.items())


class OrtFromOnnx(Converter):
    output_format = "ort"
    uses_calibration = False
    uses = ("onnxruntime",)
    uses_shapes = True
    #: a decoder's cache grows a step at a time: its past and mask dims stay dynamic (ORT Mobile resolves them)
    generation_options = {"dynamic": True}

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
            use_fixed = bool((options.get("fix_shapes") or self.shapes_used(ctx)) and fixed) and not options.get("dynamic")
            shutil.copyfile(fixed_model if use_fixed else src.path, model)
            meta["initializer_inputs"] = _initializer_inputs(model)
            ort_file, err = _to_ort(model, work / "out", ctx.timeout_s)
            if err and use_fixed:
                # fixed dims make shape computations constant, and ORT's constant folding may then fail on
                # a branch that never runs at those shapes: the model as given is what the raw tool converts
                shutil.copyfile(src.path, model)
                ort_file, err2 = _to_ort(model, work / "out2", ctx.timeout_s)
                if err2:
                    raise ConvertError(f"ORT format conversion failed: {err2}")
                meta["shapes_not_fixed"] = {"shapes": fixed, "because": err[:400]}
                meta["notes"] = [f"converted with its dynamic dims kept: with the check's shapes fixed ({_dims(fixed)}) the "
                                 f"ORT converter failed ({err[:200]}); ORT Mobile resolves the shapes at run time"]
                use_fixed = False
            elif err:
                raise ConvertError(f"ORT format conversion failed: {err}")
            if use_fixed:
                meta["fixed_shapes"] = fixed
            cfg = ort_file.with_name("model.required_operators.config")
            shutil.move(str(ort_file), str(out_dir / "model.ort"))
            if cfg.is_file():
                meta["required_operators"] = [ln for ln in cfg.read_text().splitlines() if ln and not ln.startswith("#")]
        return Artifact(path=out_dir / "model.ort", format="ort", sha256="", meta=meta)
