"""ONNX Runtime in this Python process: CPU (with or without graph optimizations) and CUDA."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import LoadError, RunError, Unavailable
from portability.runtimes.base import Availability, Runtime, modules_present, placement, time_calls

_OPT_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


def ort_error(e: Exception, cls=RunError):
    """An ORT exception as a typed error naming the op / node when the message does."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    msg = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", msg)
    msg = re.sub(r"/onnxruntime_src/\S+:\d+ .*?\) (?=[A-Z])", "", msg)  # C++ source location and signature
    msg = re.sub(r"^Load model from \S+ failed:", "Load model failed: ", msg)
    op = node = None
    m = re.search(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'", msg)
    if m:
        op, node = m.group(1), m.group(3)
    else:
        m = re.search(r"Node \(([^)]*)\) Op \((\w+)\)", msg) or re.search(r"node\. Name:'([^']*)' Status Message", msg)
        if m:
            node = m.group(1)
            op = m.group(2) if m.re.groups >= 2 else None
    return cls(msg, op=op, node=node)


def profiled(events: list[dict], backend: str) -> dict[str, Any]:
    """The placement of a session's nodes, from the profile of one inference: each node's ``Node`` event
    (``<node>_kernel_time``) names its op and the execution provider that ran it."""
    ran: dict[str, tuple[str, bool]] = {}
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time"):
            a = e.get("args") or {}
            ran.setdefault(e["name"], (a.get("op_name") or "?", a.get("provider") == backend))
    return placement(backend, list(ran.values()))


class OrtCpu(Runtime):
    """Options: ``graph_optimization`` (disabled|basic|extended|all, default all), ``threads`` (0 = ORT's default)."""

    provider = "CPUExecutionProvider"
    OPTIONS = frozenset({"graph_optimization", "threads"})
    uses = ("onnxruntime",)
    #: an optimizer pass at fault: fewer of them, then none
    fixes = tuple({"name": f"ONNX Runtime graph optimizations {level}", "options": {"graph_optimization": level}}
                  for level in ("basic", "disabled"))

    @classmethod
    def availability(cls) -> Availability:
        return modules_present("onnxruntime", hint=install("portability"))

    def _session_options(self, ort):
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[self.options.get("graph_optimization", "all")])
        so.intra_op_num_threads = int(self.options.get("threads", 0))
        so.log_severity_level = 3
        return so

    def load(self, artifact: Artifact) -> None:
        import onnxruntime as ort

        self._ort = ort
        self.meta = artifact.meta
        so = self._session_options(ort)
        # the first inference alone is profiled (``infer`` ends it), into this worker's own folder: the placement
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(os.getcwd(), f"ort_profile_{os.getpid()}")
        self._profile, self._placement = None, None
        if self.strict_backend and self.provider != "CPUExecutionProvider":
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        self._check_provider(ort)
        try:
            self.session = ort.InferenceSession(str(artifact.path), sess_options=so, providers=[self.provider])
        except Exception as e:
            raise ort_error(e, LoadError) from None
        self._out_names = [o.name for o in self.session.get_outputs()]

    def _check_provider(self, ort) -> None:
        if self.provider not in ort.get_available_providers():
            raise Unavailable(f"onnxruntime {ort.__version__} has no {self.provider}", install("portability"))

    def describe(self) -> str:
        return f"onnxruntime {self._ort.__version__}"

    def backend_requested(self) -> str:
        return self.provider

    def backend_used(self) -> str:
        return self.session.get_providers()[0]

    def details(self) -> dict[str, Any]:
        threads = int(self.options.get("threads", 0))
        return {"providers": self.session.get_providers(), "graph_optimization": self.options.get("graph_optimization", "all"),
                **({"threads": self.session.get_session_options().intra_op_num_threads} if threads else {}),
                **self.placement_details()}

    def placement_details(self) -> dict[str, Any]:
        """``{"placement": ...}`` read from the first inference's profile (then deleted), or {} without one."""
        if self._profile and self._placement is None:
            path, self._placement = Path(self._profile), {}
            try:
                self._placement = profiled(json.loads(path.read_text()), self.provider)
            except (OSError, ValueError):
                pass
            path.unlink(missing_ok=True)
        return {"placement": self._placement} if self._placement else {}

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outs = self.session.run(self._out_names, feeds)
        except Exception as e:
            raise ort_error(e) from None
        if self._profile is None:  # the later inferences (and the timed ones) are not profiled
            self._profile = self.session.end_profiling()
        return dict(zip(self._out_names, outs))

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        return time_calls(self.session.run, (self._out_names, feeds), warmup, runs)

    def output_quant(self) -> dict[str, dict] | None:
        return self.meta.get("output_quant")  # a QDQ model's outputs: the scale of their DequantizeLinear

    def close(self) -> None:
        session, self.session = getattr(self, "session", None), None
        if session is not None and self._profile is None:  # it never ran: the profile is ended and deleted
            left = session.end_profiling()
            if left:
                Path(left).unlink(missing_ok=True)
        elif getattr(self, "_profile", None):  # it ran, its placement never read
            Path(self._profile).unlink(missing_ok=True)


class OrtCuda(OrtCpu):
    provider = "CUDAExecutionProvider"
    device = "gpu"
    uses = ("onnxruntime", "onnxruntime-gpu")

    @classmethod
    def availability(cls) -> Availability:
        a = modules_present("onnxruntime", hint=install("gpu"))
        if not a.ok:
            return a
        import glob

        if not (glob.glob("/dev/nvidia[0-9]*") or glob.glob("/proc/driver/nvidia")):
            return Availability(False, "no NVIDIA GPU on this machine", f"run on a machine with a CUDA GPU, with `{install('gpu')}`")
        return Availability(True)

    def _check_provider(self, ort) -> None:
        if self.provider not in ort.get_available_providers():
            raise Unavailable(f"onnxruntime {ort.__version__} was built without the CUDA execution provider",
                              install("gpu"))
        preload = getattr(ort, "preload_dlls", None)
        if preload is not None:  # CUDA and cuDNN from the nvidia-* pip packages, as onnxruntime-gpu's docs load them
            import contextlib
            import sys

            with contextlib.redirect_stdout(sys.stderr):  # its warnings print; stdout is not the user's here
                preload(cuda=True, cudnn=True, msvc=False)

    def load(self, artifact: Artifact) -> None:
        # ORT falls back to the CPU when the CUDA provider cannot start (its libraries, the driver, the device),
        # saying why only on stderr: backend_used() tells that it fell back, ORT's own lines tell why
        text = _output_of(lambda: OrtCpu.load(self, artifact))
        self.fallback_why = fallback_reason(text) if self.backend_used() != self.provider else None

    def details(self) -> dict[str, Any]:
        d = super().details()
        if getattr(self, "fallback_why", None):
            d["fallback_reason"] = self.fallback_why
        return d


def fallback_reason(text: str) -> str | None:
    """ORT's own line for a provider that did not start (the CUDA error, else its first logged error)."""
    why = [m.group(0).strip() for m in re.finditer(r"CUDA failure[^\n]*|\[E:onnxruntime[^\n]*", text)]
    return why[0][:400] if why else None


def _output_of(call) -> str:
    """What ``call`` (native code included) wrote to file descriptors 1 and 2 (ORT's Python layer prints its
    provider errors, its native layer logs them); it is written to 2 afterwards too."""
    import sys
    import tempfile

    for f in (sys.stdout, sys.stderr):
        f.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            call()
        finally:
            for g in (sys.stdout, sys.stderr):
                g.flush()
            for fd, old in zip((1, 2), saved):
                os.dup2(old, fd)
                os.close(old)
            f.seek(0)
            text = f.read().decode(errors="replace")
            os.write(2, text.encode())
    return text
