"""MXNet 1.9 on a legacy checkpoint (the reference of MXNet sources), in MXNet's own environment.

MXNet cannot share the main stack (``core/mxnet_env.py``), so the runtime is a process of that environment
(``sources/mxnet_tool.py serve``) spoken to in the frames of ``mobile/arm64_server.py`` over its pipes.
Latency is measured in that process, around the forward pass and the copy of its outputs.
"""
from __future__ import annotations

import struct
import subprocess
from typing import Any

import numpy as np

from portability.core.artifact import Artifact
from portability.core.errors import LoadError, RunError, Unavailable
from portability.mobile.arm64_server import read_msg, write_msg
from portability.runtimes.base import Availability, Runtime


class Mxnet(Runtime):
    input_format = "mxnet"
    cost_s = 2.0  # MXNet's import in its own interpreter
    proc: subprocess.Popen | None = None

    @classmethod
    def availability(cls) -> Availability:
        from portability.core import mxnet_env

        ok, why = mxnet_env.status()
        return Availability(ok, why, mxnet_env.SETUP_HINT if not ok else None)

    def load(self, artifact: Artifact) -> None:
        from portability.core import mxnet_env
        from portability.sources.mxnet import TOOL, pair

        ok, why = mxnet_env.status()
        if not ok:
            raise Unavailable(why, mxnet_env.SETUP_HINT)
        symbol, params = pair(artifact.path)
        self.proc = subprocess.Popen([str(mxnet_env.python()), "-P", str(TOOL), "serve", str(symbol), str(params)],
                                     env=mxnet_env.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        hello, _ = self._call(None, (), LoadError)
        self.version, self.inputs, self.outputs = hello["mxnet"], hello["inputs"], hello["outputs"]

    def _call(self, header: dict | None, arrays=(), err=RunError) -> tuple[dict, list[np.ndarray]]:
        try:
            if header is not None:
                write_msg(self.proc.stdin, header, arrays)
            reply, out = read_msg(self.proc.stdout)
            if reply is None:
                raise EOFError
        except (EOFError, BrokenPipeError, OSError, ValueError, struct.error):
            rc = self.proc.poll()
            tail = (self.proc.stderr.read() or b"").decode(errors="replace").strip().splitlines()[-3:] if rc is not None else []
            raise err(f"MXNet's process died (exit {rc})" + (": " + " | ".join(tail) if tail else "")) from None
        if not reply.get("ok"):
            raise err(f"{reply.get('type')}: {reply.get('error')}")
        return reply, out

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        _, out = self._call({"cmd": "infer"}, [feeds[n] for n in self.inputs])
        return dict(zip(self.outputs, out))

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        reply, _ = self._call({"cmd": "time", "warmup": warmup, "runs": runs}, [feeds[n] for n in self.inputs])
        return reply["ms"]

    def describe(self) -> str:
        return f"MXNet {getattr(self, 'version', '')} (CPU, its own environment)".replace("  ", " ")

    def details(self) -> dict[str, Any]:
        return {"mxnet": getattr(self, "version", None)}

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
            self.proc = None
