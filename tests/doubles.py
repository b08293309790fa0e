"""Targets and runtimes that misbehave on purpose, for the test suite: they abort, hang, hog memory, add
noise, report a backend they were not asked for, hang or crash a browser page, kill an emulated process.

Not part of the package: a test run registers them through the plugin hook, ``PORTABILITY_PLUGINS=doubles``
with this folder on ``PYTHONPATH`` (``conftest.py`` puts it there for every process the tests start), so
that the CLI, its workers and the zygote all find them; ``registry()`` then holds the ``test/*`` targets.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

from portability.runtimes.ort import OrtCpu
from portability.targets import register
from portability.targets.base import Target

HERE = __name__


class Abort(OrtCpu):
    def infer(self, feeds):
        # as a native library dies: its assertion, then a coloured warning line that says nothing about it
        os.write(2, b"vec.h:1130: reference operator[](size_type): Assertion '__n < this->size()' failed.\n"
                    b"\x1b[0;93m[W:onnxruntime:Default, telemetry_1ds.cc:600] Failed to persist telemetry device ID\x1b[m\n")
        os.abort()


class Segv(OrtCpu):
    """ONNX Runtime, CPU, whose optimized graph has a kernel that crashes on Relu: the first inference of a
    model with a Relu, under the default graph optimizations, reads address 0 (a real SIGSEGV that kills its
    worker); with fewer optimizations, or without a Relu, it runs as ORT does."""

    def load(self, artifact):
        import onnx

        super().load(artifact)
        ops = {n.op_type for n in onnx.load(str(artifact.path), load_external_data=False).graph.node}
        self._crashes = "Relu" in ops and self.options.get("graph_optimization", "all") == "all"

    def infer(self, feeds):
        if self._crashes:
            import ctypes

            ctypes.string_at(0)
        return super().infer(feeds)


class Hang(OrtCpu):
    def infer(self, feeds):
        while True:
            time.sleep(1)


class Hog(OrtCpu):
    def infer(self, feeds):
        hoard = []
        while True:
            hoard.append(np.ones(64 * 2**20, dtype=np.uint8))  # touched pages: real RSS
            time.sleep(0.01)


class Slow(OrtCpu):
    def infer(self, feeds):
        time.sleep(0.02)
        return super().infer(feeds)


class Noisy(OrtCpu):
    def infer(self, feeds):
        rng = np.random.default_rng(0)
        return {k: v + rng.normal(0, 0.1, v.shape).astype(v.dtype) if v.dtype.kind == "f" else v
                for k, v in super().infer(feeds).items()}


class Echo(OrtCpu):
    """ORT CPU that also reports how its worker process started: its parent, the environment variables
    named ``PORTABILITY_ECHO_*`` and numpy's BLAS threads (the worker pool's tests)."""

    def details(self):
        from portability.workers.worker_zygote import blas_threads

        env = {k: v for k, v in os.environ.items() if k.startswith("PORTABILITY_ECHO_")}
        return {**super().details(), "echo": {"ppid": os.getppid(), "env": env, "blas_threads": blas_threads(),
                                              "cwd": os.getcwd(), "tensorflow": "tensorflow" in sys.modules,
                                              "keras": "keras" in sys.modules, "torch": "torch" in sys.modules}}


class EchoTf(Echo):
    """Echo, its worker forked from the zygote that imported TensorFlow (``server/tf``'s)."""

    pool = "tensorflow"


class Fallback(OrtCpu):
    def backend_requested(self) -> str:
        return "FancyExecutionProvider"


class _WebTesting:
    """Mixed into the onnxruntime-web runtime: misbehaves in the page on the first inference."""

    def _misbehave(self) -> None:
        raise NotImplementedError

    def infer(self, feeds):
        self._misbehave()
        return super().infer(feeds)


def _ort_web():
    from portability.runtimes.ort_web import OrtWeb

    return OrtWeb


class WebHang(_WebTesting, _ort_web()):
    def _misbehave(self) -> None:
        self._browser.call("() => { for (;;) {} }")  # the page's main thread never returns


class WebCrash(_WebTesting, _ort_web()):
    def _misbehave(self) -> None:
        from portability.web.browser import BrowserCrashed, PageError

        try:
            self._browser.goto("chrome://crash", timeout_s=10)  # its renderer process dies
        except (BrowserCrashed, PageError):
            pass
        self._browser.call("() => 1")


def _arm64_tflite():
    from portability.runtimes.arm64 import Arm64Tflite

    return Arm64Tflite


class Arm64Crash(_arm64_tflite()):
    """LiteRT's aarch64 build whose emulated process is killed (SIGKILL) on the first inference."""

    def infer(self, feeds):
        os.kill(self._reply["pid"], signal.SIGKILL)
        return super().infer(feeds)


from portability.targets.mobile import ARM64_TIMEOUT_S  # noqa: E402
register(

    Target(id="test/abort", runtime=f"{HERE}:Abort",
           description="aborts its worker (SIGABRT) on the first inference"),
    Target(id="test/segv", runtime=f"{HERE}:Segv",
           description="crashes its worker (SIGSEGV) on a model with a Relu, unless ORT's graph optimizations are lowered"),
    Target(id="test/hang", runtime=f"{HERE}:Hang",
           run_timeout_s=3, description="hangs in the first inference"),
    Target(id="test/hog", runtime=f"{HERE}:Hog",
           description="allocates memory until stopped"),
    Target(id="test/noisy", runtime=f"{HERE}:Noisy",
           description="ORT CPU plus noise on every output (a wrong model)"),
    Target(id="test/noisy-twin", runtime=f"{HERE}:Noisy",
           description="the same noise as test/noisy: two runtimes that agree with each other, not the reference"),
    Target(id="test/echo", runtime=f"{HERE}:Echo", description="ORT CPU that says how its worker started"),
    Target(id="test/echo-tf", runtime=f"{HERE}:EchoTf",
           description="ORT CPU that says how its worker started, forked from the TensorFlow zygote"),
    Target(id="test/fallback", runtime=f"{HERE}:Fallback",
           description="asks for one backend, reports another"),
    Target(id="test/web-fallback", runtime="portability.runtimes.ort_web:OrtWeb",
           options={"ep": "wasm", "threads": 2, "isolated": False},
           description="ort-wasm with 2 threads served without cross-origin isolation: ORT silently runs 1 thread"),
    Target(id="test/web-hang", runtime=f"{HERE}:WebHang", options={"ep": "wasm", "threads": 1}, run_timeout_s=20,
           description="ort-wasm whose page hangs in the first inference"),
    Target(id="test/web-crash", runtime=f"{HERE}:WebCrash", options={"ep": "wasm", "threads": 1},
           description="ort-wasm whose page crashes"),
    Target(id="test/ort-cpu-tiny-budget", runtime="portability.runtimes.ort:OrtCpu", sample_budget_s=1e-6,
           description="ONNX Runtime, CPU, with a correctness budget no inference fits: the first batch alone "
                       "is compared"),
    Target(id="test/ort-cpu-slow", runtime=f"{HERE}:Slow", run_timeout_s=4,
           description="ONNX Runtime, CPU, 20 ms per inference, with a 4 s run time limit"),
    Target(id="test/arm64-crash", runtime=f"{HERE}:Arm64Crash", variant={"quant": "fp32"}, run_timeout_s=ARM64_TIMEOUT_S,
           description="LiteRT's aarch64 build whose emulated process is killed on the first inference"),
)
