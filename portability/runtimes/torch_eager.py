"""Eager PyTorch on a ``torch.export`` program (``server/torch``): the reference of ``.pt2`` sources.

The program is opened through ``portability.sources.torch_export`` (vetted: nothing is unpickled) and
run as ``program.module()`` under ``torch.inference_mode()``, on the CPU."""
from __future__ import annotations

from typing import Any

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import BadModel, LoadError, RunError
from portability.runtimes.base import Availability, Runtime, modules_present, time_calls


class TorchEager(Runtime):
    input_format = "torch"
    cost_s = 2.0  # importing torch
    uses = ("torch",)
    pool = "torch"  # it imports PyTorch: its worker forks from the pool that imported it
    OPTIONS = frozenset({"threads"})

    @classmethod
    def availability(cls) -> Availability:
        return modules_present("torch", hint=install("torch"))

    def load(self, artifact: Artifact) -> None:
        import torch

        from portability.sources.torch_export import open_program

        self._torch = torch
        if self.options.get("threads"):
            torch.set_num_threads(int(self.options["threads"]))
        try:
            self.module = open_program(artifact.path).module()
        except BadModel as e:
            raise LoadError(str(e)) from None
        sig = artifact.meta.get("onnx_signature") or {}
        self._in = [t["name"] for t in sig.get("inputs", [])]
        self._out = [t["name"] for t in sig.get("outputs", [])]

    def describe(self) -> str:
        return f"torch {self._torch.__version__} (eager, torch.export program, {self._torch.get_num_threads()} threads)"

    def _call(self, xs: tuple) -> list[np.ndarray]:
        with self._torch.inference_mode():
            y = self.module(*xs)
        ys = list(y.values()) if isinstance(y, dict) else y if isinstance(y, (list, tuple)) else [y]  # a dict: by its keys
        return [v.detach().numpy() for v in ys]

    def _args(self, feeds: dict[str, np.ndarray]) -> tuple:
        return tuple(self._torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self._in)

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return dict(zip(self._out, self._call(self._args(feeds))))
        except Exception as e:
            raise RunError(f"PyTorch failed: {(str(e).strip().splitlines() or [type(e).__name__])[0]}") from None

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        return time_calls(self._call, (self._args(feeds),), warmup, runs)

    def details(self) -> dict[str, Any]:
        return {"threads": self._torch.get_num_threads()}
