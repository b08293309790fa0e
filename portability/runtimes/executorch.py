"""ExecuTorch's runtime (the C++ runtime through its Python bindings, ``executorch.runtime``) on a ``.pte``:
PyTorch's own mobile runtime, here on this machine's CPU.

The program's delegate (XNNPACK, or none: the portable kernels) was chosen when it was lowered
(``converters/executorch.py``); the two targets built on it are an A/B of the delegate against the portable
reference kernels. Inputs and outputs are positional: the source's signature names them.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import LoadError, RunError
from portability.runtimes.base import Availability, Runtime, modules_present, time_calls


def et_error(e: Exception, cls=RunError):
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = f"ExecuTorch: {type(e).__name__}: " + " | ".join(lines[:3])[:500]
    m = re.search(r"(?:[Oo]perator|kernel)[^']*'([\w:.]+)'", msg)
    return cls(msg, op=m.group(1) if m else None)


class ExecuTorchRuntime(Runtime):
    input_format = "pte"
    uses = ("executorch",)
    pool = "torch"  # it imports PyTorch: its worker forks from the pool that imported it
    cost_s = 6.0  # importing torch and executorch

    @classmethod
    def availability(cls) -> Availability:
        a = modules_present("torch", hint=f"{install('torch')}, then: {install('executorch')}")
        return modules_present("executorch", hint=install("executorch")) if a.ok else a

    def load(self, artifact: Artifact) -> None:
        import torch  # first: ExecuTorch's extension links against the installed torch's libraries

        self._torch = torch
        try:
            from executorch.runtime import Runtime as EtRuntime

            self.program = EtRuntime.get().load_program(str(artifact.path))
            self.method = self.program.load_method("forward")
        except Exception as e:
            raise et_error(e, LoadError) from None
        self.meta = artifact.meta
        sig = artifact.meta.get("onnx_signature") or {}
        self._in = [t["name"] for t in sig.get("inputs", [])]
        self._out = [t["name"] for t in sig.get("outputs", [])]

    def describe(self) -> str:
        from importlib.metadata import version

        return f"executorch {version('executorch')} ({self.meta.get('delegate', '?')})"

    def backend_requested(self) -> str:
        return self.meta.get("delegate", "?")

    def backend_used(self) -> str:
        delegated = self.meta.get("delegated") or {}
        return "xnnpack" if "XnnpackBackend" in delegated else "portable"

    def details(self) -> dict[str, Any]:
        return {"delegated": self.meta.get("delegated") or {}, "produced_by": self.meta.get("produced_by")}

    def _args(self, feeds: dict[str, np.ndarray]) -> list:
        return [self._torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self._in]

    def _call(self, args: list) -> list[np.ndarray]:
        ys = self.method.execute(args)
        return [y.numpy() if hasattr(y, "numpy") else np.asarray(y) for y in ys]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return dict(zip(self._out, self._call(self._args(feeds))))
        except Exception as e:
            raise et_error(e) from None

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        return time_calls(self.method.execute, (self._args(feeds),), warmup, runs)  # what an app calls per frame

    def close(self) -> None:
        self.method = self.program = None
