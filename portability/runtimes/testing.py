"""Runtimes that misbehave on purpose (the test suite's ``test/*`` targets)."""
from __future__ import annotations

import os
import signal
import time

import numpy as np

from portability.runtimes.ort import OrtCpu


class Abort(OrtCpu):
    def infer(self, feeds):
        os.abort()


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


class Noisy(OrtCpu):
    def infer(self, feeds):
        rng = np.random.default_rng(0)
        return {k: v + rng.normal(0, 0.1, v.shape).astype(v.dtype) if v.dtype.kind == "f" else v
                for k, v in super().infer(feeds).items()}


class Echo(OrtCpu):
    """ORT CPU that also reports how its worker process started: its parent, the environment variables
    named ``PORTABILITY_ECHO_*`` and numpy's BLAS threads (the worker pool's tests)."""

    def details(self):
        from portability.engine.worker_zygote import blas_threads

        env = {k: v for k, v in os.environ.items() if k.startswith("PORTABILITY_ECHO_")}
        return {**super().details(), "echo": {"ppid": os.getppid(), "env": env, "blas_threads": blas_threads(),
                                              "cwd": os.getcwd()}}


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
