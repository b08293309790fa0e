"""OrtWeb: onnxruntime-web in headless Chromium, one execution provider per page.

Options: ``ep`` (wasm | webgl | webgpu | webnn; ``device_type`` for WebNN: cpu | gpu | npu), ``threads`` (wasm threads; >1 needs cross-origin isolation,
without it ORT silently runs one thread, reported as a fallback), ``bundle`` (the dist file the page
imports; each EP has its own and they differ in behaviour, so the one used is named in the report).
"""
from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from portability.core.artifact import Artifact
from portability.core.errors import RunError, TargetError, Unavailable
from portability.runtimes.ort import OrtCpu
from portability.runtimes.web import WebRuntime

BUNDLES = {"wasm": "ort.wasm.min.mjs", "webgl": "ort.webgl.min.mjs", "webgpu": "ort.webgpu.min.mjs", "webnn": "ort.all.min.mjs"}
#: the wasm files a page loads beside its bundle: the plain build (wasm, WebGL), else the JSEP builds too
_WASM = ("ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
_JSEP = _WASM + ("ort-wasm-simd-threaded.jsep.mjs", "ort-wasm-simd-threaded.jsep.wasm",
                 "ort-wasm-simd-threaded.asyncify.mjs", "ort-wasm-simd-threaded.asyncify.wasm")
#: ORT's provider names (in its node placement log) -> the ep names of onnxruntime-web
_PROVIDERS = {"CPUExecutionProvider": "wasm", "WebGpuExecutionProvider": "webgpu", "JsExecutionProvider": "webgpu",
              "WebNNExecutionProvider": "webnn"}

# ORT-web messages that name the failing op, most specific first
_OP_PATTERNS = (
    re.compile(r"Could not find an implementation for (?P<op>\w+)\(\d+\) node with name '(?P<node>[^']*)'"),
    re.compile(r"[Uu]nrecognized operator '(?P<op>\w+)'"),
    re.compile(r"cannot resolve operator '(?P<op>\w+)' with opsets"),
    re.compile(r"no kernel .*? for (?:op|operator) '?(?P<op>\w+)'?", re.I),
    re.compile(r"Node \((?P<node>[^)]*)\) Op \((?P<op>\w+)\)"),
    re.compile(r"of Optype \((?P<op>\w+)\).*? in node \((?P<node>[^)]*)\)"),
    re.compile(r"[Oo]perator '?(?P<op>\w+)'? (?:is )?not (?:supported|implemented)"),
)
_ORT_LOG = re.compile(r"\[[VI]:onnxruntime:")
_PLACED = re.compile(r"placed on \[(\w+)\]\. Number of nodes: (\d+)")


def _warm_model() -> bytes:
    """A one-node Identity model: creating it initialises the runtime (wasm compile, GPU device)."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "warm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return m.SerializeToString()


def op_from_message(message: str) -> tuple[str | None, str | None]:
    for pat in _OP_PATTERNS:
        m = pat.search(message)
        if m:
            d = m.groupdict()
            return d.get("op"), d.get("node")
    return None, None


class OrtWeb(WebRuntime):
    engine = "ort"
    OPTIONS = WebRuntime.OPTIONS | {"ep", "threads", "bundle", "graph_optimization", "device_type"}
    packages: ClassVar[dict[str, str]] = {"onnxruntime-web": "dist/ort.wasm.min.mjs"}
    uses = ("onnxruntime-web", "playwright")
    backend_option = "ep"
    fixes = OrtCpu.fixes  # the same engine's optimizer, in the browser
    placement: dict[str, int] | None = None
    placement_nodes: dict[str, list[str]] | None = None

    @property
    def ep(self) -> str:
        return self.options.get("ep", "wasm")

    @property
    def threads(self) -> int:
        return int(self.options.get("threads", 1))

    @property
    def bundle(self) -> str:
        return self.options.get("bundle") or BUNDLES[self.ep]

    @classmethod
    def requested(cls, options: dict[str, Any]) -> str:
        return _backend(options.get("ep", "wasm"), int(options.get("threads", 1)))

    def page_config(self, artifact: Artifact) -> dict[str, Any]:
        self._output_quant = artifact.meta.get("output_quant")  # a QDQ model's outputs: their scales
        return {"bundle": self.bundle, "ep": self.ep, "threads": self.threads, "deviceType": self.options.get("device_type", "cpu"),
                "graphOptimization": self.options.get("graph_optimization", "all"),
                "warmModel": self._server.put_blob("warm.onnx", _warm_model()),
                # what this model asks of the device, checked before its session is made
                "needs": {"shaderF16": str(artifact.meta.get("quantization", "")).startswith("float16")}}

    @classmethod
    def npm_files(cls, config: dict[str, Any]) -> list[str]:
        dist = "onnxruntime-web/dist/"
        return [dist + config["bundle"], *(dist + f for f in (_WASM if config.get("ep") in ("wasm", "webgl") else _JSEP))]

    def keep_console(self, kind: str, text: str) -> bool:
        # the session is created with verbose logging for its node placement; drop the rest of it
        return "VerifyEachNodeIsAssignedToAnEp" in text or "placed on [" in text or not _ORT_LOG.search(text)

    def after_load(self) -> None:
        super().after_load()
        lines = [t for _, t in self._browser.console]
        self.placement = _placement(lines)
        self.placement_nodes = _placed_nodes(lines)

    def pool_facts(self) -> dict[str, Any]:
        return {"placement": self.placement, "placement_nodes": self.placement_nodes}

    def restore(self, facts: dict[str, Any]) -> None:
        self.placement = facts.get("placement")
        self.placement_nodes = facts.get("placement_nodes")

    def output_quant(self) -> dict[str, dict] | None:
        return getattr(self, "_output_quant", None)

    def describe(self) -> str:
        return f"onnxruntime-web {self._info.get('version') or '?'} ({self.bundle}, {self.ep})"


    def backend_used(self) -> str | None:
        if not self._info:
            return None
        threads = int(self._info.get("threads") or 1)
        if threads > 1 and not self._info.get("crossOriginIsolated"):
            threads = 1  # ORT warns on the console and runs one thread
        return _backend(self._ep_used(), threads)

    def _ep_used(self) -> str:
        """The requested EP when it ran at least one node (ORT keeps shape ops on the CPU by design),
        else the one that ran most (the whole model fell back)."""
        if not self.placement:
            return self._info.get("ep") or self.ep
        ran = {_PROVIDERS.get(p, p): n for p, n in self.placement.items()}
        return self.ep if ran.get(self.ep) else max(ran, key=ran.get)

    def details(self) -> dict[str, Any]:
        d = {**super().details(), "threads_requested": self.threads}
        if self.placement:
            d["node_placement"] = dict(self.placement)
        if self.placement_nodes and len(self.placement_nodes) > 1:  # a partial fallback: which nodes ran where
            d["node_placement_nodes"] = self.placement_nodes
        return d

    decodes_in = "page"

    def decodes_where(self, context) -> str:
        return "worker" if context else self.decodes_in

    def decode(self, layout, inputs, prompt: list[int], steps: int, teacher: list[int] | None = None,
               context: dict[str, np.ndarray] | None = None):
        """Greedy decoding in the page (``harness/ort.mjs``'s ``generate``): the cache stays in onnxruntime-web's
        own tensors from step to step; only each step's token, last-position logits and time come back. An
        encoder-decoder's decoder (``context``: the encoder's outputs) is run one page inference a step, its loop
        in the worker (the page's loop feeds no encoder states yet)."""
        from portability.core.generate import Decoded
        from portability.core.decoder import PAST_AXIS

        if context or layout.states:
            return super().decode(layout, inputs, prompt, steps, teacher, context)

        specs = {s.name: s for s in inputs}
        names = {"ids": layout.ids, "mask": layout.mask, "positions": layout.positions,
                 "cacheBranch": layout.cache_branch, "past": list(layout.past),
                 "presents": list(layout.presents)}
        dims = {p: [specs[p].shape[1], specs[p].shape[PAST_AXIS + 1]] for p in layout.past}
        if any(not isinstance(d, int) for pair in dims.values() for d in pair):
            raise RunError("--generate: the past's heads or head size are dynamic: fix them with --shape")
        spec = {"prompt": [int(t) for t in prompt], "steps": int(steps), "teacher": [int(t) for t in teacher] if teacher else None,
                "names": names, "pastDims": dims,
                "int64": [n for n in (layout.ids, layout.mask, layout.positions) if n and specs[n].dtype == "int64"]}
        res = self._call("s => harness.generate(s)", spec)
        self._info = res.get("info") or self._info
        return Decoded(tokens=[int(t) for t in res["tokens"]], logits=[np.asarray(x, np.float64) for x in res["logits"]],
                       step_ms=[float(x) for x in res["stepMs"]])

    def op_error(self, message: str, cls: type[TargetError]) -> TargetError:
        if re.search(r"no available backend found|Failed to get GPU adapter|WebGPU is not supported|"
                     r"WebGL is not supported|cannot create WebGL", message, re.I):
            return Unavailable(f"{self.ep} is not usable in this Chromium: {message}",
                               "a GPU or a software adapter (SwiftShader) for the browser")
        if message.find("WebNN unavailable") >= 0:
            return Unavailable(f"{message} (tried: navigator.ml with --enable-features=WebMachineLearningNeuralNetwork; "
                               "a Linux Chromium has WebNN only with its TFLite backend, which Debian's is built without: webnn_use_tflite=false)",
                               "a Chrome or Chromium build with WebNN's TFLite backend")
        if re.search(r"requires f16 but the device does not support it", message):  # the adapter, not the model
            return Unavailable(f"this browser's WebGPU adapter has no float16 shaders (shader-f16): {message}",
                               "a GPU whose WebGPU adapter offers shader-f16 (SwiftShader does not)")
        op, node = op_from_message(message)
        return cls(message, op=op, node=node)


def _placement(lines) -> dict[str, int] | None:
    """ORT's "Node placements" log lines -> {execution provider: number of nodes}."""
    out: dict[str, int] = {}
    for line in lines:
        m = _PLACED.search(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
    return out or None


_NODE = re.compile(r"VerifyEachNodeIsAssignedToAnEp\]\s+(\w+) \(([^()]*)\)\s*$")
#: the most node names kept per execution provider
_MAX_NAMES = 500


def _placed_nodes(lines) -> dict[str, list[str]]:
    """ORT's verbose placement log, node by node ("  Conv (name)" after each "placed on [EP]" line) ->
    {execution provider: [node names]} (names as the log gives them, at most ``_MAX_NAMES`` each)."""
    out: dict[str, list[str]] = {}
    ep = None
    for line in lines:
        m = _PLACED.search(line)
        if m:
            ep = m.group(1)
            out.setdefault(ep, [])
            continue
        n = _NODE.search(line)
        if n and ep is not None and len(out[ep]) < _MAX_NAMES:
            out[ep].append(n.group(2))
    return {k: v for k, v in out.items() if v}


def _backend(ep: str, threads: int) -> str:
    return f"{ep} ({threads} threads)" if threads > 1 else ep
