"""ONNX Runtime's Python tools (``onnxruntime.tools``) imported without PyTorch.

The package's ``__init__`` imports PyTorch wherever it is installed, for its PyTorch export helpers only (none of
the tools this project runs — the ORT format converter, the mobile usability checker, ``onnx_model_utils``, the
symbolic shape inference — uses it): 1.5-3 s of CPU for every worker that fixes a model's input shapes, and again
in the ORT format converter's process. Hidden from that import, PyTorch is never loaded for them; a process that
has imported PyTorch already keeps it."""
from __future__ import annotations

import importlib
import sys
from types import ModuleType

from portability.converters.torchless import torch_hidden

#: ``python -c`` this, then a tool module's name and its arguments: the module run as ``python -m`` runs it, its
#: package imported without PyTorch
RUN_WITHOUT_TORCH = (
    "import runpy, sys\n"
    "sys.modules.setdefault('torch', None)\n"
    "module = sys.argv.pop(1)\n"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
)


def ort_tool(module: str) -> ModuleType:
    """``onnxruntime.tools.<module>``, its package imported without PyTorch (unless imported already)."""
    with torch_hidden():
        return importlib.import_module(f"onnxruntime.tools.{module}")


def tool_command(module: str, *args: str) -> list[str]:
    """The command line that runs ``onnxruntime.tools.<module>`` as ``python -m`` would, without PyTorch."""
    return [sys.executable, "-c", RUN_WITHOUT_TORCH, f"onnxruntime.tools.{module}", *args]
