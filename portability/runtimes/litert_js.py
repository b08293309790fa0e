"""LiteRtJs: a ``.tflite`` file in headless Chromium with LiteRT.js (@litertjs/core).

The ONNX <-> TFLite mapping (names, NHWC, quantization) is the one the onnx2tf converter recorded in
``artifact.meta["tflite_io"]``, applied with the same helpers as the in-process LiteRT runtime. In the
page, tensors are keyed by the model's tensor names.

Options: ``accelerator`` (wasm | webgpu; default wasm), ``threads`` (>1 loads the threaded wasm module,
which needs cross-origin isolation).
"""
from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from portability.core.artifact import Artifact
from portability.core.errors import LoadError, RunError, TargetError, Unavailable, UsageError
from portability.runtimes.base import output_dtypes
from portability.runtimes.web import WebRuntime

#: LiteRT's messages that name an op it cannot run ("Encountered unresolved custom op: FlexErf",
#: "Didn't find op for builtin opcode 'GELU' version '2'")
_OP = re.compile(r"unresolved custom op: (\w+)|find op for builtin opcode '(\w+)'"
                 r"|[Oo]p (?:type )?'?(\w+)'? (?:is )?not supported")


class LiteRtJs(WebRuntime):
    engine = "litert"
    OPTIONS = WebRuntime.OPTIONS | {"accelerator", "threads"}
    packages: ClassVar[dict[str, str]] = {"@litertjs/core": "dist/index.js", "@litertjs/wasm-utils": "dist/index.js"}
    served = ("@litertjs/core/dist", "@litertjs/core/wasm", "@litertjs/wasm-utils/dist")
    input_format = "tflite"
    backend_field = backend_option = "accelerator"

    @property
    def accelerator(self) -> str:
        return self.requested(self.options)

    def page_config(self, artifact: Artifact) -> dict[str, Any]:
        from portability.runtimes.litert import custom_ops, tflite_io
        from portability.web.paths import package_version

        flex = [op for op in custom_ops(artifact.path) if op.startswith("Flex")]
        if flex:  # LiteRT.js has no Flex delegate, and runs an unresolved op without a word: garbage, not drift
            raise LoadError(f"{flex[0]} is a TensorFlow (Flex) op that LiteRT.js cannot run (it has no Flex delegate, and "
                            f"would run the model with the op unresolved, giving garbage); Flex ops in the file: "
                            f"{', '.join(flex)}", op=flex[0])

        self._io = tflite_io(artifact)
        self._onnx_dtypes = output_dtypes(artifact)
        return {"accelerator": self.accelerator, "threads": int(self.options.get("threads", 1)),
                "version": package_version("@litertjs/core")}

    def after_load(self) -> None:
        super().after_load()
        dynamic = [t for t in self._info.get("inputs") or [] if any(d < 0 for d in t["shape"])]
        if dynamic:  # LiteRT.js has no resize: every run would fail on the shape check
            t = dynamic[0]
            self.close()
            raise LoadError(f"LiteRT.js {self._info.get('version')} cannot resize inputs, and input '{t['name']}' has a "
                            f"dynamic shape {t['shape']}: give the model fixed input shapes for the web")

    def to_page(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from portability.runtimes.litert import to_tflite

        arrays = to_tflite(self._io, feeds)
        return {e.tensor: a for e, a in zip(self._io.inputs, arrays)}

    def from_page(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from portability.runtimes.litert import from_tflite

        raw = []
        plain = {_plain(n): n for n in outputs}
        for i, e in enumerate(self._io.outputs):
            # by its tensor's name, or its signature key (LiteRT.js names a signature's outputs by their keys)
            name = next((plain[k] for k in (_plain(e.tensor), _plain(e.key or "")) if k in plain), None)
            if name is None:  # names differ between the two runtimes: fall back to the output order
                names = list(outputs)
                if len(names) != len(self._io.outputs):
                    raise RunError(f"LiteRT.js gave outputs {names}, expected {[o.tensor for o in self._io.outputs]}")
                name = names[i]
            raw.append(outputs[name])
        return from_tflite(self._io, raw, self._onnx_dtypes)

    def page_outputs(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for e in self._io.outputs:
            if e.quant:
                raise UsageError(f"{e.onnx}: a quantized LiteRT.js output is not bundled")
            y = outputs[e.onnx]
            out[e.tensor] = y.transpose(np.argsort(e.perm)) if e.perm is not None else y
        return out

    def page_output_names(self) -> dict[str, str]:
        return {e.tensor: e.onnx for e in self._io.outputs}

    def describe(self) -> str:
        return f"LiteRT.js {self._info.get('version') or '?'} ({self.accelerator} accelerator)"

    def details(self) -> dict[str, Any]:
        d = super().details()
        if self._io:
            d["layout"] = {e.onnx: {"tensor": e.tensor, "to_tflite": list(e.perm) if e.perm is not None else None}
                           for e in self._io.inputs}
        fully = self._info.get("fullyAccelerated")
        if isinstance(fully, bool):  # LiteRT.js says whether the whole model, not which nodes
            d["placement"] = {"backend": self.accelerator, "fully": fully}
        return d

    def op_error(self, message: str, cls: type[TargetError]) -> TargetError:
        if self.accelerator == "webgpu" and re.search(r"WebGPU is not supported|no adapter|requestAdapter", message, re.I):
            return Unavailable(f"WebGPU is not usable in this Chromium: {message}", "a GPU or a software adapter (SwiftShader)")
        console = " ".join(self._browser.console_text()) if self._browser else ""
        m = _OP.search(message) or _OP.search(console)
        if m:
            op = next(g for g in m.groups() if g)
            return LoadError(f"{message} ({m.group(0)})" if m.group(0) not in message else message, op=op)
        return cls(message)


def _plain(name: str) -> str:
    """A tensor's name without its ``:0`` and ``serving_default_`` (LiteRT.js and the file may differ so)."""
    return re.sub(r"^serving_default_", "", re.sub(r":\d+$", "", str(name)))
