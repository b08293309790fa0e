"""Tfjs: a TensorFlow.js graph model in headless Chromium, on one backend (cpu | wasm | webgl | webgpu).

The artifact comes from onnx2tf (ONNX -> SavedModel, channels last) and the tensorflowjs converter;
``artifact.meta["tfjs_io"]`` maps ONNX names to signature keys and gives the layout permutations,
applied here so that the pipeline sees ONNX names and layouts. TF.js has float32, int32 and bool
tensors only: int64 feeds are narrowed to int32 (refused when a value does not fit).

Options: ``backend`` (default wasm), ``threads`` (wasm backend; default 1).
"""
from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from portability.core.artifact import Artifact
from portability.core.errors import LoadError, RunError, TargetError, Unavailable
from portability.runtimes.base import output_dtypes
from portability.runtimes.web import WebRuntime

# TF.js messages naming an op it cannot run; a fused activation names the ONNX-side op (Tanh, ...)
_OP = re.compile(r"(?:Tensorflow Op is not supported|Op is not supported)[:\s]*'?(?P<op>\w+)'?"
                 r"|Kernel '(?P<kernel>\w+)' not registered"
                 r"|Activation (?P<act>\w+) has not been implemented"
                 r"|(?P<act2>\w+) activation not yet supported for \w+"
                 r"|Error in (?P<failed>\w+):")
#: TF.js kernels that fail at run time ("Error in conv2d: ...") -> the ONNX op they compute (a converter's
#: fixes are declared by ONNX op: onnx2tf -dgc splits a grouped Conv that TF.js's conv2d cannot run)
_ONNX_OP = {"conv2d": "Conv", "depthwiseConv2d": "Conv", "conv3d": "Conv", "conv2dTranspose": "ConvTranspose",
            "matMul": "MatMul", "batchMatMul": "MatMul"}


class Tfjs(WebRuntime):
    engine = "tfjs"
    OPTIONS = WebRuntime.OPTIONS | {"backend", "threads"}
    packages: ClassVar[dict[str, str]] = {"@tensorflow/tfjs": "dist/tf.min.js",
                                          "@tensorflow/tfjs-backend-wasm": "dist/tf-backend-wasm.min.js",
                                          "@tensorflow/tfjs-backend-webgpu": "dist/tf-backend-webgpu.min.js"}
    input_format = "tfjs"
    uses = ("@tensorflow/tfjs", "playwright")
    backend_field = backend_option = "backend"

    @property
    def backend(self) -> str:
        return self.requested(self.options)

    def page_config(self, artifact: Artifact) -> dict[str, Any]:
        io = artifact.meta.get("tfjs_io")
        if not io:
            raise LoadError(f"{artifact.path.name}: no ONNX <-> TF.js tensor mapping in the artifact's metadata "
                            "(was it produced by TfjsFromSavedModel?)")
        self._io = io
        self._onnx_dtypes = output_dtypes(artifact)
        return {"backend": self.backend, "threads": int(self.options.get("threads", 1))}

    def to_page(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for e in self._io["inputs"]:
            x = np.asarray(feeds[e["onnx"]])
            x = x.transpose(e["to_tfjs"]) if e.get("to_tfjs") is not None else x
            out[e["key"]] = _narrow(e["onnx"], x, e["dtype"])
        return out

    def from_page(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for e in self._io["outputs"]:
            name = e.get("node") if e.get("node") in outputs else e["key"]  # by its graph node, else its key
            if name not in outputs:
                raise RunError(f"the TF.js model gave no output '{name}' (it gave {sorted(outputs)})")
            y = outputs[name]
            if e.get("to_onnx") is not None and y.ndim != len(e["to_onnx"]):
                raise RunError(f"the TF.js model's output '{name}' has shape {list(y.shape)}, not the rank of the "
                               f"ONNX output '{e['onnx']}' it was matched with: the converter renamed the outputs "
                               f"({', '.join(sorted(outputs))}) and their order could not be recovered")
            y = y.transpose(e["to_onnx"]) if e.get("to_onnx") is not None else y
            out[e["onnx"]] = y.astype(self._onnx_dtypes.get(e["onnx"], y.dtype), copy=False)
        return out

    def page_outputs(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for e in self._io["outputs"]:
            y = outputs[e["onnx"]]
            out[e["key"]] = y.transpose(np.argsort(e["to_onnx"])) if e.get("to_onnx") is not None else y
        return out

    def page_output_names(self) -> dict[str, str]:
        return {e["key"]: e["onnx"] for e in self._io["outputs"]}

    @classmethod
    def npm_files(cls, config: dict[str, Any]) -> list[str]:
        files = ["@tensorflow/tfjs/dist/tf.min.js"]
        if config.get("backend") == "wasm":
            d = "@tensorflow/tfjs-backend-wasm/dist/"
            files += [d + "tf-backend-wasm.min.js", d + "tfjs-backend-wasm.wasm", d + "tfjs-backend-wasm-simd.wasm",
                      d + "tfjs-backend-wasm-threaded-simd.wasm"]
        if config.get("backend") == "webgpu":
            files.append("@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js")
        return files

    def describe(self) -> str:
        return f"TensorFlow.js {self._info.get('version') or '?'} ({self.backend} backend, graph model)"

    def details(self) -> dict[str, Any]:
        d = super().details()
        if self._io:
            d["layout"] = {e["onnx"]: {"key": e["key"], "to_tfjs": e.get("to_tfjs")} for e in self._io["inputs"]}
        return d

    def op_error(self, message: str, cls: type[TargetError]) -> TargetError:
        if re.search(r"Backend name '\w+' not found|Initialization of backend \w+ failed", message):
            return Unavailable(f"TF.js {self.backend} backend cannot start in this Chromium: {message}",
                               "a GPU or a software adapter (SwiftShader) for the browser")
        m = _OP.search(message)
        if m:  # the stage stays what it was: an op missing when the graph loads, or when it first runs
            d = m.groupdict()
            act = d["act"] or d["act2"]
            if d["failed"]:
                return cls(message, op=_ONNX_OP.get(d["failed"], d["failed"]))
            return cls(message, op=d["op"] or d["kernel"] or act.capitalize())
        return cls(message)


def _narrow(name: str, x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "int32" and x.dtype.kind in "iu" and x.dtype != np.int32:
        if x.size and (x.min() < np.iinfo(np.int32).min or x.max() > np.iinfo(np.int32).max):
            raise RunError(f"input '{name}': values outside int32, which is TF.js's widest integer")
        return x.astype(np.int32)
    if dtype == "bool":
        return x.astype(bool)
    return x.astype(dtype, copy=False)
