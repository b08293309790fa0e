"""Runtimes that misbehave on purpose (the test suite's ``test/*`` targets)."""
from __future__ import annotations

import os
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


class Fallback(OrtCpu):
    def backend_requested(self) -> str:
        return "FancyExecutionProvider"
