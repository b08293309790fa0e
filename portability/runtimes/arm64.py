"""The same artifacts on ARM64 builds of LiteRT and ONNX Runtime, under qemu-user emulation.

The runtime lives in a long-lived emulated Python (``portability/mobile/arm64_server.py``) spoken to over
pipes; mapping (NCHW <-> NHWC, quantization) happens here on the host, exactly as ``LiteRt`` does it.
Latencies are measured inside the emulated process and are **emulated** times (qemu is ~100-300x slower
than the hardware): ``emulated`` is True, useful only to compare targets under the same
emulation. What the emulation shows faithfully is the arithmetic: ARM kernels (NEON paths of XNNPACK,
MLAS) may round differently from x86's.
"""
from __future__ import annotations

import io
import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from portability.core.artifact import Artifact
from portability.core.errors import LoadError, RunError, Unavailable
from portability.runtimes.base import Availability, Runtime
from portability.runtimes.litert import (TfliteMapped, batches, default_threads, from_tflite, layout_details,
                                         litert_error, quant_details, to_tflite)
from portability.runtimes.ort import ort_error

SERVER = Path(__file__).resolve().parent.parent / "mobile" / "arm64_server.py"


class _Emulated(Runtime):
    kind = ""
    emulated = True
    cost_s = 3.0  # an emulated Python and its imports, emulated inference

    @classmethod
    def availability(cls) -> Availability:
        from portability.mobile import arm64

        ok, reason = arm64.status()
        return Availability(True) if ok else Availability(False, reason, arm64.SETUP_HINT)

    def _start(self) -> None:
        from portability.mobile import arm64

        ok, reason = arm64.status()
        if not ok:
            raise Unavailable(reason, arm64.SETUP_HINT)
        argv, env = arm64.command()
        self.versions = arm64.versions()
        self.proc = subprocess.Popen(argv + ["-u", str(SERVER)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def _call(self, header: dict, arrays=(), err=RunError) -> tuple[dict, list[np.ndarray]]:
        p = self.proc
        try:
            h = json.dumps(dict(header, arrays=len(arrays))).encode()
            p.stdin.write(struct.pack("<Q", len(h)) + h)
            for a in arrays:
                b = io.BytesIO()
                np.save(b, np.ascontiguousarray(a), allow_pickle=False)
                p.stdin.write(struct.pack("<Q", b.tell()) + b.getvalue())
            p.stdin.flush()
            head = p.stdout.read(8)
            if len(head) < 8:
                raise EOFError
            reply = json.loads(p.stdout.read(struct.unpack("<Q", head)[0]))
            out = []
            for _ in range(reply.get("arrays", 0)):
                n = struct.unpack("<Q", p.stdout.read(8))[0]
                out.append(np.load(io.BytesIO(p.stdout.read(n)), allow_pickle=False))
        except (EOFError, BrokenPipeError, OSError):
            rc = p.poll()
            tail = (p.stderr.read() or b"").decode(errors="replace").strip().splitlines()[-5:] if rc is not None else []
            raise err(f"the emulated ARM64 process died (exit {rc})" + (": " + " | ".join(tail) if tail else "")) from None
        if not reply.get("ok"):
            raise self._error(reply, err)
        return reply, out

    def _error(self, reply: dict, cls):
        return cls(f"{reply.get('type')}: {reply.get('error')}")

    def _load(self, path: Path, ins: list, outs: list, kernels: str | None = None) -> None:
        self.threads = int(self.options.get("threads") or default_threads())
        self._start()
        req = {"cmd": "load", "kind": self.kind, "path": str(path), "threads": self.threads,
               "kernels": kernels or "xnnpack", "inputs": ins, "outputs": outs}
        reply, _ = self._call(req, err=LoadError)
        self._reply = reply
        self.version, self.machine = reply["version"], reply.get("machine")

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        reply, _ = self._call({"cmd": "time", "warmup": warmup, "runs": runs}, self._prepare(feeds))
        return reply["ms"]

    def _prepare(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.version} linux-{self.machine} under qemu-aarch64 emulation ({self.threads} threads)"

    def details(self) -> dict[str, Any]:
        return {"emulator": "qemu-aarch64-static", "machine": self.machine, "threads": self.threads,
                "arm64_versions": self.versions, "latency_note": "emulated time: compare only with other emulated targets"}

    def close(self) -> None:
        p = getattr(self, "proc", None)
        if p and p.poll() is None:
            try:
                self._call({"cmd": "quit"})
            except Exception:
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.proc = None


class Arm64Tflite(TfliteMapped, _Emulated):
    """LiteRT's aarch64 build. Options: ``kernels`` (xnnpack|builtin|reference), ``threads``."""

    input_format = "tflite"
    kind = "tflite"
    OPTIONS = frozenset({"kernels", "threads"})

    def load(self, artifact: Artifact) -> None:
        self._open_mapping(artifact)
        self._load(artifact.path, [e.index for e in self.io.inputs], [e.index for e in self.io.outputs], self.kernels)

    def _error(self, reply: dict, cls):
        return litert_error(RuntimeError(reply.get("error", "")), cls)

    def _prepare(self, feeds):
        return batches(self.io, to_tflite(self.io, feeds))[0]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        parts = [self._call({"cmd": "infer"}, b)[1] for b in batches(self.io, to_tflite(self.io, feeds))]
        raw = [np.concatenate(ys) if len(parts) > 1 else ys[0] for ys in zip(*parts)]
        return from_tflite(self.io, raw, self._dtypes)

    def describe(self) -> str:
        return super().describe().replace(" (", f" ({self.kernels}, ", 1)

    def details(self) -> dict[str, Any]:
        return {**super().details(), "kernels": self.kernels, "quant": self.meta.get("quant"),
                "layout": layout_details(self.io), **quant_details(self.io)}


class Arm64Ort(_Emulated):
    """ONNX Runtime's aarch64 build on the ``.ort`` (or ``.onnx``) artifact. Options: ``threads``."""

    input_format = "ort"
    kind = "ort"
    OPTIONS = frozenset({"threads"})

    def load(self, artifact: Artifact) -> None:
        self.meta = artifact.meta
        self._load(artifact.path, [], [])

    def _error(self, reply: dict, cls):
        return ort_error(RuntimeError(reply.get("error", "")), cls)

    def _prepare(self, feeds):
        missing = [n for n in self._reply["inputs"] if n not in feeds]
        if missing:
            raise RunError(f"missing input(s) {', '.join(missing)}" + (
                " (the model lists its weights as graph inputs; the ORT-format session demands them)"
                if set(missing) & set(self.meta.get("initializer_inputs", [])) else ""))
        return [feeds[n] for n in self._reply["inputs"]]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        _, outs = self._call({"cmd": "infer"}, self._prepare(feeds))
        return dict(zip(self._reply["outputs"], outs))

    def details(self) -> dict[str, Any]:
        d = super().details()
        for k in ("mobile_usability", "target_platform"):
            if k in self.meta:
                d[k] = self.meta[k]
        return d
