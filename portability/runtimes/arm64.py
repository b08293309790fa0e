"""The same artifacts on ARM64 builds of LiteRT and ONNX Runtime, under qemu-user emulation.

The runtime lives in an emulated Python (``portability/mobile/arm64_server.py``) spoken to in frames: in a
check, a child that the check's shared fork server (``mobile/arm64_service.py``) forks for this target,
over a unix socket (no start-up, no imports); alone, or when that server could not start, a process of
its own, over pipes. The model goes by content (its file's bytes in the ``load`` frame), never by path.
Mapping (NCHW <-> NHWC, quantization) happens here on the host, exactly as ``LiteRt`` does it.
Latencies are measured inside the emulated process and are **emulated** times (qemu is ~100-300x slower
than the hardware): ``emulated`` is True, useful only to compare targets under the same
emulation. What the emulation shows faithfully is the arithmetic: ARM kernels (NEON paths of XNNPACK,
MLAS) may round differently from x86's.
"""
from __future__ import annotations

import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from portability.core.artifact import Artifact
from portability.core.errors import LoadError, RunError, Unavailable
from portability.mobile.arm64_server import read_msg, write_msg  # the emulated side's own framing
from portability.runtimes.base import Availability, Runtime
from portability.runtimes.litert import (TfliteMapped, batches, default_threads, from_tflite, layout_details,
                                         litert_error, quant_details, to_tflite)
from portability.runtimes.ort import ort_error

from portability.mobile.arm64 import SERVER  # noqa: E402  (the emulated server's script)


class _Emulated(Runtime):
    #: the engine that runs it in the emulated Python (``mobile/device_engines.py``, a bundle's runner's too)
    device_engine: ClassVar[str] = ""
    emulated = True
    cost_s = 3.0  # an emulated Python and its imports, emulated inference
    proc: subprocess.Popen | None = None
    sock: socket.socket | None = None
    _endpoint: str | None = None
    _rss_mb: float | None = None

    providers: ClassVar[dict[str, tuple[str, Any]]] = {"arm64": ("portability.mobile.arm64_service:Arm64Service", None)}

    @classmethod
    def service(cls, options: dict[str, Any]) -> str | None:
        return "arm64"

    @classmethod
    def availability(cls) -> Availability:
        from portability.mobile import arm64

        ok, reason = arm64.status()
        return Availability(True) if ok else Availability(False, reason, arm64.SETUP_HINT)

    def _start(self) -> None:
        """Connect to the check's shared emulator, else start an emulated Python of its own."""
        from portability.mobile import arm64

        ok, reason = arm64.status()
        if not ok:
            raise Unavailable(reason, arm64.SETUP_HINT)
        self.versions = arm64.versions()
        endpoint = self.services.get(self.service(self.options))
        if endpoint:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(30)
                self.sock.connect(endpoint)
                self.sock.settimeout(None)  # an emulated inference may take long: the worker's limits apply
                self._r, self._w = self.sock.makefile("rb"), self.sock.makefile("wb")
                self._endpoint = endpoint
                return
            except OSError as e:
                print(f"the shared ARM64 emulator at {endpoint} cannot be reached ({e}): starting one for this target",
                      file=sys.stderr)
                self._close_socket()
        argv, env = arm64.command()
        self.proc = subprocess.Popen(argv + ["-u", str(SERVER)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._r, self._w = self.proc.stdout, self.proc.stdin

    def _call(self, header: dict, arrays=(), err=RunError) -> tuple[dict, list[np.ndarray]]:
        try:
            write_msg(self._w, header, arrays)
            reply, out = read_msg(self._r)
            if reply is None:
                raise EOFError
        except (EOFError, BrokenPipeError, OSError, ValueError, struct.error):  # a frame cut short: it died
            raise err(self._died()) from None
        self._rss_mb = reply.get("rss_mb", self._rss_mb)
        if not reply.get("ok"):
            raise self._error(reply, err)
        return reply, out

    def _died(self) -> str:
        p = self.proc
        if p is None:
            return "the emulated ARM64 process died (its connection to the shared emulator closed)"
        rc = p.poll()
        tail = (p.stderr.read() or b"").decode(errors="replace").strip().splitlines()[-5:] if rc is not None else []
        return f"the emulated ARM64 process died (exit {rc})" + (": " + " | ".join(tail) if tail else "")

    def _error(self, reply: dict, cls):
        return cls(f"{reply.get('type')}: {reply.get('error')}")

    def _load(self, path: Path, ins: list, outs: list, kernels: str | None = None) -> None:
        self.threads = int(self.options.get("threads") or default_threads())
        try:  # the model goes by content: the emulated process reads no model folder
            content = np.fromfile(path, dtype=np.uint8)
        except OSError as e:
            raise LoadError(f"cannot read the model file {path}: {e}") from None
        self._start()
        fmt = Path(path).suffix.lstrip(".").lower() or self.input_format
        req = {"cmd": "load", "engine": self.device_engine, "format": fmt, "threads": self.threads,
               "kernels": kernels or "xnnpack", "inputs": ins, "outputs": outs}
        reply, _ = self._call(req, [content], err=LoadError)
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
        d = {"emulator": "qemu-aarch64-static", "machine": self.machine, "threads": self.threads,
             "arm64_versions": self.versions, "shared_emulator": bool(self._endpoint),
             "latency_note": "emulated time: compare only with other emulated targets"}
        if self._rss_mb is not None:
            d["emulated_peak_rss_mb"] = self._rss_mb
        return d

    def _close_socket(self) -> None:
        for f in (getattr(self, "_r", None), getattr(self, "_w", None), self.sock):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        self.sock = self._r = self._w = None

    def close(self) -> None:
        if self.sock is not None:
            try:  # no reply: the serving child exits when it reads this, or when the connection closes
                write_msg(self._w, {"cmd": "quit"})
            except OSError:
                pass
            self._close_socket()
        p = self.proc
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
    device_engine = "litert"
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
    device_engine = "ort"
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
