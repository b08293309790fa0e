"""The runtime-version matrix: ``check --versions onnxruntime=1.20.1,1.31.1``.

Each version of a package other than the installed one lives in an environment of its own, built once in
the cache and reused (``environments``): a Python package in a virtual environment that sees this one's
packages with only that package installed over them; a browser package in a package folder of its own
beside the harness's other packages. The targets whose runtime or converters use the package (``uses``, a
class fact of runtimes and converters) run once more per such version, as ``<target id>@<version>``, in a
fresh worker of that environment (``expansion``); the installed version keeps the plain id. A version that
cannot be installed here is a ``skipped`` target with the reason, never a crash. After the run, each
version's outputs are compared with the other versions' (``comparison``): the report's ``versions``.

The seam, and the only names used from outside: ``parse`` (the flag and the settings file's key, for
``settings``), ``expand`` (the planner's one call) and ``compare`` (the check's one call after its run).
``packages`` is the literal registry of the packages ``--versions`` takes.
"""
from __future__ import annotations

from portability.matrix.comparison import compare
from portability.matrix.expansion import expand
from portability.matrix.packages import parse

__all__ = ["parse", "expand", "compare"]
