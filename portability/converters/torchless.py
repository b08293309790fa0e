"""Packages imported with PyTorch hidden, where PyTorch is installed but the work at hand never calls it.

Some packages import PyTorch at their own import wherever it is installed, for parts of theirs that a given
conversion does not use: ONNX Runtime's tools (for its PyTorch export helpers, ``ort_tools``), Core ML Tools (for
its PyTorch frontend, and torchao's quantizers through it: 5-9 s of import in a worker that converts a SavedModel).
Hidden, an import of PyTorch fails as where it is not installed, and such a package takes the path it takes there.
A process that has imported PyTorch already keeps it."""
from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def torch_hidden():
    """Within: ``import torch`` fails and ``importlib.util.find_spec("torch")`` is None (unless PyTorch is imported
    already)."""
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None
    try:
        yield
    finally:
        if hide and "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]
