"""ONNX Runtime on an ORT-format (``.ort``) model: what ORT Mobile runs on a phone, on the CPU EP.

This machine's ONNX Runtime has no NNAPI / CoreML execution providers; their static coverage (from the
converter's mobile usability analysis) goes into ``details()`` so the report can say what a phone's
accelerator would take.
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from portability.core.errors import RunError
from portability.runtimes.litert import default_threads
from portability.runtimes.ort import OrtCpu


class OrtMobile(OrtCpu):
    """Options: ``threads`` (default 4, capped to this machine's cores, as on a phone)."""

    input_format = "ort"
    OPTIONS = frozenset({"threads"})
    #: the engine that runs the file on a device (``mobile/device_engines.py``): a mobile bundle's
    device_engine: ClassVar[str] = "ort"

    @classmethod
    def device_tensors(cls, artifact, ref: dict, feeds: list[dict], options: dict[str, Any],
                       outputs: list[str]) -> tuple[dict, dict[str, np.ndarray]]:
        """A device's copy of a check, for its engine: the tensors (ONNX names and layout: each batch's call,
        each output's reference keys) and the arrays they name (as ``TfliteMapped.device_tensors``)."""
        names = list(feeds[0]) if feeds else []
        arrays: dict[str, np.ndarray] = {}
        calls = []
        for b, batch in enumerate(feeds):
            keys = [f"feed_{b}_0_{i}" for i in range(len(names))]
            arrays.update({k: np.ascontiguousarray(batch[n]) for k, n in zip(keys, names)})
            calls.append([keys])
        outs = []
        for j, name in enumerate(outputs):
            keys = [f"ref_{b}_{j}" for b in range(len(feeds))]
            arrays.update({k: np.ascontiguousarray(ref[name][b]) for b, k in enumerate(keys)})
            outs.append({"onnx": name, "name": name, "quant": None, "ref": keys})
        return {"inputs": [{"name": n, "onnx": n} for n in names], "outputs": outs, "calls": calls}, arrays

    def _session_options(self, ort):
        self.threads = int(self.options.get("threads") or default_threads())
        so = ort.SessionOptions()
        so.add_session_config_entry("session.load_model_format", "ORT")
        so.intra_op_num_threads = self.threads
        so.log_severity_level = 3
        return so

    def describe(self) -> str:
        return f"onnxruntime {self._ort.__version__} (ORT format, CPU EP)"

    def details(self) -> dict[str, Any]:
        d = {"providers": self.session.get_providers(), "threads": self.threads, "format": "ort", **self.placement_details()}
        for k in ("mobile_usability", "shapes_fixed_for_usability_check", "fixed_shapes", "shapes_not_fixed", "target_platform"):
            if k in self.meta:
                d[k] = self.meta[k]
        return d

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return super().infer(feeds)
        except RunError as e:
            weights = [n for n in self.meta.get("initializer_inputs", []) if n in str(e)]
            if weights:
                raise RunError(f"{e} — the model lists its weights as graph inputs (old exporters did); "
                               f"the ORT-format session demands them as real inputs ({', '.join(weights[:3])}…). "
                               "Re-export without weights as inputs (onnxruntime.tools.remove_initializer_from_input)",
                               op=e.op, node=e.node) from None
            raise
