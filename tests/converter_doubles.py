"""Converters for the worker pool's tests, apart from ``doubles`` (importing this registers no target)."""
from __future__ import annotations

import os
import sys

from portability.converters.base import Converter


class CopyTf(Converter):
    """A copy of the ONNX model made by a Python tool run as onnx2tf's is (``run_tool``), by a converter that imports
    TensorFlow (``pool``): the tool says how it started (whether TensorFlow was imported, its parent, its folder)."""

    input_format = output_format = "onnx"
    pool = "tensorflow"
    TOOL = ("import json, os, shutil, sys; shutil.copyfile(sys.argv[1], sys.argv[2]); print(json.dumps("
            "{'tensorflow': 'tensorflow' in sys.modules, 'ppid': os.getppid(), 'cwd': os.getcwd(), 'argv': sys.argv}))")

    def version(self) -> str:
        return "1"

    def convert(self, src, out_dir, options, ctx):
        import json

        from portability.converters.base import run_tool
        from portability.core.artifact import Artifact

        p = run_tool([sys.executable, "-c", self.TOOL, str(src.path), str(out_dir / "model.onnx")], "the copying tool", ctx.timeout_s)
        print(f"CopyTf made its copy in worker {os.getpid()}", file=sys.stderr, flush=True)  # for the worker's log
        return Artifact(path=out_dir / "model.onnx", format="onnx", sha256="",
                        meta={**src.meta, "tool": json.loads(p.stdout.splitlines()[-1]), "worker": os.getpid(),
                              "worker_ppid": os.getppid()})


class CopyTfjs(CopyTf):
    """``CopyTf`` as the TF.js converter runs its tool: in its own pool (``tfjs``), TensorFlow without oneDNN's
    rewrites (``TF_ENABLE_ONEDNN_OPTS=0``, read at TensorFlow's import); the tool says that setting too, and each
    step's tool is kept apart in the artifact's meta."""

    pool = "tfjs"
    TOOL = CopyTf.TOOL.replace("'argv': sys.argv", "'argv': sys.argv, 'onednn': os.environ.get('TF_ENABLE_ONEDNN_OPTS')")

    def convert(self, src, out_dir, options, ctx):
        import json

        from portability.converters.base import run_tool
        from portability.core.artifact import Artifact

        p = run_tool([sys.executable, "-c", self.TOOL, str(src.path), str(out_dir / "model.onnx")], "the copying tool",
                     ctx.timeout_s, TF_ENABLE_ONEDNN_OPTS="0")
        print(f"CopyTfjs made its copy in worker {os.getpid()}", file=sys.stderr, flush=True)  # for the worker's log
        return Artifact(path=out_dir / "model.onnx", format="onnx", sha256="",
                        meta={**src.meta, "tfjs_tool": json.loads(p.stdout.splitlines()[-1]), "tfjs_worker": os.getpid(),
                              "tfjs_worker_ppid": os.getppid()})


class CopyTorch(Converter):
    """A copy of the ONNX model by a converter that imports PyTorch (``pool``), saying whether it was imported."""

    input_format = output_format = "onnx"
    pool = "torch"

    def version(self) -> str:
        return "1"

    def convert(self, src, out_dir, options, ctx):
        import shutil

        from portability.core.artifact import Artifact

        torch_before = "torch" in sys.modules
        shutil.copyfile(src.path, out_dir / "model.onnx")
        return Artifact(path=out_dir / "model.onnx", format="onnx", sha256="",
                        meta={**src.meta, "torch_before": torch_before, "worker": os.getpid()})
