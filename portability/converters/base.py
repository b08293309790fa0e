"""The Converter interface: one conversion per class, named ``<Output>From<Input>``.

``convert`` is a pure function of (input bytes, converter version, options, calibration data): the
pipeline calls it through the content-addressed cache (``portability.workers.cache``), so a second run
with the same inputs converts nothing. Converters run inside a worker process.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import Availability
from portability.core.availability import package_version  # noqa: F401  (converters import it from here)


@dataclass
class ConvertContext:
    """What a converter may need besides the source artifact.

    ``calibration``: representative inputs (ONNX input name -> array stacked over samples, ONNX layout),
    with ``calibration_source`` saying where they came from: "dataset" (samples of ``--dataset``, held out from
    evaluation unless ``--calibrate-on-eval``), "file" (``--calibration``, or ``--inputs``) or "synthesized"
    (the check's random inputs). A converter that calibrates (``uses_calibration``) says what it calibrated on
    in its artifact's meta: ``meta["calibration"]`` (for people: the source, the samples used, the method, e.g.
    "dataset (64 samples, MinMax)") and ``meta["calibration_source"]`` (one of the three words; "synthesized"
    also where it made up samples itself), and may add ``meta["calibration_samples"]`` (int) and
    ``meta["calibration_method"]`` ("MinMax", "Entropy", "Percentile"...); the report's ``details.calibration``
    is made from them (``report/calibration.py``).
    ``timeout_s``: the conversion's time budget (the worker is killed past it).
    ``signature``: the source ONNX model's inputs and outputs (read once, by the isolated loader).
    ``input_shapes``: the static shapes the check resolved for inputs with dynamic dimensions (input
    name -> dims; empty for a static model). Converters that need static shapes use them.
    """

    calibration: dict[str, np.ndarray] | None = None
    calibration_source: str | None = None
    timeout_s: float | None = None
    input_shapes: dict[str, list[int]] | None = None
    #: the source model's signature (``ModelInfo.signature()``), from the job
    signature: dict | None = None


class Converter(ABC):
    input_format: ClassVar[str] = "onnx"
    output_format: ClassVar[str]
    #: True when the result depends on ``ctx.calibration`` (it then enters the cache key)
    uses_calibration: ClassVar[bool] = False
    #: the packages it converts with (``check --versions`` converts again per asked version of one)
    uses: ClassVar[tuple[str, ...]] = ()
    #: True when the result depends on ``ctx.input_shapes`` (they then enter the cache key and the record)
    uses_shapes: ClassVar[bool] = False
    #: the variants it can make, option name -> values (``{"quant": ("fp32", "fp16")}``): a target asking
    #: for a variant of its format is reached through a last step that lists it (``engine.plan``)
    variants: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: the planner's tie-break between routes of equal length (higher: taken only when forced)
    cost: ClassVar[int] = 1
    #: a copy of the source into the cache: the first step of every chain from a source of its format
    snapshot: ClassVar[bool] = False
    #: taken only when ``--via`` names it (a second converter for a hop that has one: a cross-check)
    on_request: ClassVar[bool] = False
    #: options it takes for a model that generates (``check --generate``: the planner adds them), e.g. dynamic
    #: dimensions kept so that a decoder's cache can grow step by step
    generation_options: ClassVar[dict[str, Any]] = {}
    #: the documented alternatives ``fix`` retries a failing target under, for a route through it, in order
    #: (``explain.fix``): each ``{"name", "options"}`` (its converter options; an argument ``"{ops}"`` or
    #: ``"{inputs}"`` stands for the model's ops among ``"ops"`` or its input names, and the alternative
    #: applies only when there are some), ``"ops"`` (applies to a model with one of them, or of unknown ops)
    #: and ``"drift_only"`` (tried on a drift, not on a failure to convert or run)
    fixes: ClassVar[tuple[dict[str, Any], ...]] = ()
    #: True when it reduces precision and takes the option ``float_nodes`` (ONNX node names kept in float):
    #: ``fix`` then searches the smallest such set under which its target passes (``explain.rescue``)
    keeps_float: ClassVar[bool] = False
    #: the raw tool's command line that converts as an alternative does (``{args}``: its ``args`` option)
    fix_command: ClassVar[str | None] = None
    #: the worker pool a worker that runs this conversion forks from (``Runtime.pool``): ``tensorflow`` for a
    #: converter that imports TensorFlow, itself or in the Python tool it runs (``converters.forked``); a
    #: worker whose conversions are all cached forks from its runtime's pool
    pool: ClassVar[str] = ""
    #: the Python modules it imports, itself or in the tool it runs, each with the command that installs it, in
    #: the order to check them (``availability``)
    requires: ClassVar[dict[str, str]] = {}

    @classmethod
    def availability(cls) -> Availability:
        """Whether it can convert here: every module of ``requires`` findable (``find_spec``: nothing imported)."""
        import importlib.util

        for mod, hint in cls.requires.items():
            if importlib.util.find_spec(mod) is None:
                return Availability(False, f"Python package '{mod}' is not installed (needed by {cls.__name__})", hint)
        return Availability(True)

    @classmethod
    def quantizable_nodes(cls, graph) -> list[str]:
        """The nodes of ``graph`` (an ONNX GraphProto) whose precision it reduces: ``float_nodes`` candidates,
        in the graph's order (a converter that ``keeps_float`` says which)."""
        return []

    @classmethod
    def shapes_used(cls, ctx: ConvertContext) -> dict[str, list[int]] | None:
        """The static input shapes this converter receives from ``ctx`` (None when it takes none)."""
        return dict(ctx.input_shapes) if cls.uses_shapes and ctx.input_shapes else None

    @classmethod
    def name(cls) -> str:
        return cls.__name__

    @abstractmethod
    def version(self) -> str:
        """Version of the converting software (enters the cache key). Cheap: importlib.metadata."""

    @abstractmethod
    def convert(self, src: Artifact, out_dir: Path, options: dict[str, Any], ctx: ConvertContext) -> Artifact:
        """Write the converted model into the empty folder ``out_dir`` and return it as an Artifact.

        Raise ConvertError with the converter's meaningful message lines on failure, Unavailable when
        the converter is not installed. Never touch the network; never modify ``src``'s files."""


def require(modules: dict[str, str], purpose: str) -> None:
    """Raise Unavailable (the target is skipped, with the install hint) unless every module is installed.
    ``modules``: module name -> the install hint."""
    import importlib.util

    from portability.core.errors import Unavailable

    for mod, hint in modules.items():
        if importlib.util.find_spec(mod) is None:
            raise Unavailable(f"Python package '{mod}' is not installed (needed {purpose})", hint)


def offline_env(**extra: str) -> dict[str, str]:
    """This process's environment for a converter subprocess that must never reach the network: every
    proxy points at a closed port, so any download fails at once, offline or not."""
    import os

    env = dict(os.environ, **extra)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env[var] = "http://127.0.0.1:9"
    env.pop("NO_PROXY", None), env.pop("no_proxy", None)
    return env


def run_tool(cmd: list[str], what: str, timeout_s: float | None, cwd=None, **env: str):
    """Run a converter's command line offline (``offline_env``), in ``cwd`` or a scratch folder, its output
    captured as text; a run past ``timeout_s`` is a ConvertError naming ``what``. A Python command line runs in a
    fork of this worker where that is the same program with TensorFlow imported already (``converters.forked``)."""
    import subprocess
    import tempfile

    from portability.core.errors import ConvertError

    from portability.converters import forked

    with tempfile.TemporaryDirectory(prefix="portability-tool-") as scratch:
        full = offline_env(**env)
        try:
            if forked.why_not(cmd, full) is None:  # TensorFlow imported here: a fork of this worker runs it
                return forked.run(cmd, str(cwd or scratch), full, timeout_s)
            return subprocess.run(cmd, cwd=cwd or scratch, env=full, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ConvertError(f"{what} did not finish within {timeout_s:.0f} s") from None
