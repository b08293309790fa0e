"""OpenVINO on the CPU, in this Python process: a second, independent runtime for the server and the edge.

OpenVINO reads ONNX and ``.tflite`` files itself (its own frontends; no converter of ours in between), so
the planner runs an ONNX or a TFLite source as given and takes the shortest route otherwise.

Options: ``precision``: the CPU plugin's inference precision, ``f32`` (default: the model's own precision)
or ``default`` (OpenVINO's choice for this CPU: bf16 on CPUs with AMX or AVX-512 BF16, which is what an
unconfigured deployment gets) or ``bf16`` / ``f16``; ``threads`` (0: OpenVINO's default). The precision
that ran is in the details.

A ``.tflite`` artifact speaks its own names and layouts: the converter's mapping (``meta["tflite_io"]``)
turns the ONNX-shaped feeds into its tensors and back, as for LiteRT.
"""
from __future__ import annotations

import logging
import re
import sys
from typing import Any

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import LoadError, RunError
from portability.runtimes.base import Availability, Runtime, modules_present, output_dtypes, placement, time_calls
from portability.runtimes.litert import batches, from_tflite, tflite_io, to_tflite

log = logging.getLogger(__name__)

_PRECISIONS = {"f32": "f32", "bf16": "bf16", "f16": "f16", "default": None}


#: execution-graph layers that compute nothing of the model's (inputs, outputs, constants, layout changes)
_BOOKKEEPING = {"Input", "Output", "Const", "Reorder", "Reshape", "Transpose"}


def ov_error(e: Exception, cls=LoadError):
    """An OpenVINO exception in one line, naming the op its frontend could not convert when it says."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.strip().startswith(("src/", "/"))]
    msg = " ".join(lines)[:600] or type(e).__name__
    if isinstance(e, (KeyError, IndexError, TypeError, ValueError)):  # Python's, not OpenVINO's: say which
        msg = f"{type(e).__name__}: {msg}"
    m = re.search(r"No conversion rule found for operations?: ([\w.:, -]+)", msg) \
        or re.search(r"OpenVINO does not support the following \w+ operations?: ([\w.:, -]+)", msg)
    op = m.group(1).split(",")[0].strip().split(":")[-1].strip() or None if m else None
    return cls(msg, op=op)


def import_openvino():
    """``openvino``, without its usage telemetry: the package imports its model converter, which starts a
    telemetry client that writes a client id under ``~/intel`` at import (and sends events when opted in). A
    check does neither; with ``openvino_telemetry`` unimportable, OpenVINO uses its own no-op stub."""
    sys.modules.setdefault("openvino_telemetry", None)
    sys.modules.setdefault("openvino_telemetry.backend", None)
    import openvino

    return openvino


class OpenVinoCpu(Runtime):
    input_format = "onnx"
    input_formats = ("onnx", "tflite")
    uses = ("openvino",)
    OPTIONS = frozenset({"precision", "threads"})
    cost_s = 1.0

    @classmethod
    def availability(cls) -> Availability:
        return modules_present("openvino", hint=install("openvino"))

    def load(self, artifact: Artifact) -> None:
        ov = self._ov = import_openvino()
        self.format = artifact.format
        precision = self.options.get("precision", "f32")
        if precision not in _PRECISIONS:
            raise LoadError(f"unknown OpenVINO precision {precision!r} (one of {', '.join(_PRECISIONS)})")
        config: dict[str, Any] = {}
        if _PRECISIONS[precision]:
            config["INFERENCE_PRECISION_HINT"] = _PRECISIONS[precision]
        if int(self.options.get("threads", 0)):
            config["INFERENCE_NUM_THREADS"] = int(self.options["threads"])
        self.io = tflite_io(artifact) if self.format == "tflite" else None
        core = ov.Core()
        try:
            model = core.read_model(str(artifact.path))
            self.compiled = core.compile_model(model, "CPU", config)
        except Exception as e:
            raise ov_error(e) from None
        self.request = self.compiled.create_infer_request()
        self._in = [p.get_any_name() for p in self.compiled.inputs]
        self._out = list(self.compiled.outputs)
        if self.io is None:  # a port has several names (an input that feeds a Concat may be named after its
            # output): each port by the ONNX graph's own name, in the graph's order where none matches
            graph = _onnx_io(artifact.path)
            self._in = [_named(p.get_names(), graph[0], i) for i, p in enumerate(self.compiled.inputs)]
            self._out_names = [_named(p.get_names(), graph[1], i) for i, p in enumerate(self._out)]
        if self.io is not None:
            self._dtypes = output_dtypes(artifact)
            names = {n for p in self.compiled.inputs for n in p.get_names()}
            # the file's tensors by name (OpenVINO's tflite frontend keeps them), else in the file's order
            self._in_order = [e.tensor if e.tensor in names else self._in[i] for i, e in enumerate(self.io.inputs)]
            out_names = [p.get_names() for p in self._out]
            self._out_order = [next((j for j, ns in enumerate(out_names) if e.tensor in ns), i) for i, e in enumerate(self.io.outputs)]

    def describe(self) -> str:
        return f"OpenVINO {self._ov.__version__.split('-')[0]} (CPU, {self.format})"

    def backend_requested(self) -> str:
        return "CPU"

    def backend_used(self) -> str:
        return ",".join(self.compiled.get_property("EXECUTION_DEVICES"))

    def details(self) -> dict[str, Any]:
        asked = self.compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        return {"read_from": self.format, "inference_precision": asked,
                "threads": int(self.compiled.get_property("INFERENCE_NUM_THREADS")),
                "placement": self.placement(asked)}

    def placement(self, asked: str) -> dict[str, Any] | None:
        """The layers the CPU plugin computes (its execution graph, bookkeeping layers aside) in the precision
        the target asked for (``f32``, or the plugin's own default hint), and the others by type and
        precision: OpenVINO may compute a layer in another precision than asked (``bf16`` where the CPU has it)."""
        want = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(asked, asked)
        ran = []
        try:
            for op in self.compiled.get_runtime_model().get_ordered_ops():
                info = op.get_rt_info()
                kind, prec = info["layerType"].astype(str), info["runtimePrecision"].astype(str)
                if kind not in _BOOKKEEPING:
                    ran.append((f"{kind}@{prec}", prec == want))
        except Exception as e:  # an execution graph without these fields: no placement rather than no target
            log.debug("OpenVINO execution graph unreadable: %s", e)
            return None
        return placement(f"CPU {want}", ran)

    def _call(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        res = self.request.infer(inputs)
        return [np.array(res[p]) for p in self._out]

    def _onnx_feeds(self, feeds: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
        return {i: np.ascontiguousarray(feeds[n]) for i, n in enumerate(self._in)}  # by port index

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            if self.io is None:
                return dict(zip(self._out_names, self._call(self._onnx_feeds(feeds))))
            parts = []
            for arrays in batches(self.io, to_tflite(self.io, feeds)):
                ys = self._call(dict(zip(self._in_order, arrays)))
                parts.append([ys[j] for j in self._out_order])
        except Exception as e:
            raise ov_error(e, RunError) from None
        raw = [np.concatenate(ys) if len(parts) > 1 else ys[0] for ys in zip(*parts)]
        return from_tflite(self.io, raw, self._dtypes)

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        if self.io is None:
            inputs = self._onnx_feeds(feeds)
        else:
            inputs = dict(zip(self._in_order, batches(self.io, to_tflite(self.io, feeds))[0]))
        return time_calls(self.request.infer, (inputs,), warmup, runs)  # what an app calls per frame

    def close(self) -> None:
        self.request = self.compiled = None


def _onnx_io(path) -> tuple[list[str], list[str]]:
    """The ONNX graph's input (initializers aside) and output names, in order."""
    import onnx

    g = onnx.load(str(path), load_external_data=False).graph
    inits = {t.name for t in g.initializer}
    return [i.name for i in g.input if i.name not in inits], [o.name for o in g.output]


def _named(names, graph: list[str], i: int) -> str:
    """A port's name as the graph says it: the one of ``names`` the graph has, else the graph's ``i``-th."""
    return next((n for n in graph if n in names), graph[i] if i < len(graph) else sorted(names)[0])
