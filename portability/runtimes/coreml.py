"""Core ML (``mobile/coreml``): a convert-only target. Core ML Tools converts on Linux, but Core ML predicts
only on Apple platforms (macOS, iOS), so this runtime never runs the model: once the conversion succeeded
(its size and op counts are in the report), ``load`` ends the target as ``skipped`` with that reason —
never a pass. A failed conversion is a ``convert-error`` naming the op Core ML Tools could not convert."""
from __future__ import annotations

import numpy as np

from portability.core.artifact import Artifact
from portability.core.availability import install
from portability.core.errors import Unavailable
from portability.runtimes.base import Availability, Runtime, modules_present


class CoreMlConvertOnly(Runtime):
    input_format = "coreml"
    uses = ("coremltools",)
    #: never predicts here: a ``skipped`` after its conversion is all this target can be (``engine.verdict.unmet``)
    convert_only = True

    @classmethod
    def availability(cls) -> Availability:
        return modules_present("coremltools", hint=install("coreml"))

    def load(self, artifact: Artifact) -> None:
        ops = artifact.meta.get("ops") or {}
        what = f"an ML program of {sum(ops.values())} operations" if ops else "an ML program"
        raise Unavailable(f"converted to Core ML ({what}, computing in float16); Core ML predicts only on Apple "
                          "platforms, so this convert-only target does not run here",
                          "run the .mlpackage on a Mac or an iPhone (coremltools' MLModel.predict)")

    def describe(self) -> str:
        from importlib.metadata import version

        return f"coremltools {version('coremltools')} (convert only)"

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise Unavailable("Core ML predicts only on Apple platforms")

    def time(self, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> list[float]:
        raise Unavailable("Core ML predicts only on Apple platforms")
