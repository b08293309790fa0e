"""The check's evaluation: what a target's worker returned, measured — its outputs against the reference's, its
metrics against its thresholds — as an :class:`Evaluated` that the verdict (``engine/verdict.py``) turns into
the target's result. Holds the reference's outputs once it has run."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from portability.core import inputs as inp
from portability.core.artifact import artifact_notes
from portability.core.errors import UsageError
from portability.core.model import ModelInfo, quantization
from portability.core.protocol import WorkerResult, load_outputs
from portability.core.status import Status
from portability.converters.registry import fix_hint
from portability.settings.options import CheckOptions
from portability.workers import log_tail
from portability import metrics
from portability.metrics import accuracy as acc
from portability.metrics import thresholds
from portability.metrics.base import Evaluation
from portability.metrics.latency import samples_note, summarize, timing_note
from portability.report import calibration
from portability.targets import Target

#: the worker outcomes whose log tail the report keeps
_LOGGED = (Status.CRASHED, Status.TIMEOUT, Status.RUN_ERROR, Status.LOAD_ERROR, Status.CONVERT_ERROR)


@dataclass(frozen=True)
class Evaluated:
    """What evaluation found of one target's run: the evidence the verdict decides on."""

    worker: WorkerResult
    metrics: dict
    thresholds: dict
    #: the reasons its metrics breach; None where nothing was compared (the worker failed, or the reference)
    found: list[str] | None
    #: what evaluation says of the run: the samples it compared, its timing, its artifact, its calibration
    notes: tuple[str, ...]
    details: dict
    hint: str | None


class Evaluator:
    """One check's evaluation: measures each worker's result, the reference's first."""

    def __init__(self, model: ModelInfo, feeds: inp.Feeds, opts: CheckOptions, robustness=None,
                 reference: str = "", plans: dict | None = None, calibration: dict | None = None):
        self.model, self.feeds, self.opts = model, feeds, opts
        #: what the check handed the converters that calibrate (``engine.prepare.Calibration.facts``)
        self.calibration = calibration or {}
        #: target id -> its ``details.calibration``, of every target that calibrates
        self.calibrated: dict[str, dict] = {}
        #: the robustness pass (``metrics.robustness.run.Robustness``), with ``--robustness``
        self.robustness = robustness
        self.out_names = tuple(o.name for o in model.outputs)
        #: the bounds of a model quantized already (``metrics.thresholds``), else None
        self.quantized = {"static": thresholds.INT8, "dynamic": thresholds.DYNINT8}.get(quantization(model.quantized_ops))
        if opts.scores_output and opts.scores_output not in self.out_names:
            raise UsageError(f"--scores-output {opts.scores_output}: the model has no such output "
                             f"(outputs: {', '.join(self.out_names)})")
        self.ref_outputs: dict[str, np.ndarray] = {}
        self.ref_metrics: dict = {}
        self.ref_perturbed: dict[str, np.ndarray] = {}
        #: the reference's decoding (``--generate``), once it ran
        self.ref_generation: dict | None = None
        self.score_name: str | None = None
        #: target id -> output name -> array, of every target that ran
        self.outputs: dict[str, dict[str, np.ndarray]] = {}
        #: the source's own runtime, and each target's plan (recorded in its details)
        self.reference = reference
        self.plans = plans or {}

    def thresholds_for(self, target: Target) -> dict:
        """The target's bounds, loosened to a quantized model's where the model is quantized already, then
        the user's."""
        base = target.thresholds
        if self.quantized and target.id != self.reference:
            base = thresholds.looser(thresholds.merged(base), thresholds.merged(self.quantized))
        return thresholds.merged(base, self.opts.thresholds, self.opts.target_thresholds.get(target.id))

    def quantized_note(self) -> list[str]:
        if not self.quantized:
            return []
        q = self.quantized
        return [f"the model is quantized already ({quantization(self.model.quantized_ops)}: "
                f"{', '.join(self.model.quantized_ops)}): every target is judged as a quantized model is, like the TFLite "
                f"int8 variants (cosine >= {q['cosine']}, top-1 agreement >= {q['top1_agreement']}, max_abs reported "
                "but not judged), since runtimes' integer kernels round differently"]

    def random_note(self) -> list[str]:
        from portability.core.random_ops import note

        return [note(self.model.random_ops)] if self.model.random_ops else []

    @staticmethod
    def _details(wr: WorkerResult) -> dict:
        details = dict(wr.details)
        if wr.conversions:
            details["conversions"] = [c.to_dict() for c in wr.conversions]
        for k in ("backend_requested", "backend_used"):
            if getattr(wr, k):
                details[k] = getattr(wr, k)
        if wr.emulated:
            details["emulated"] = True
        if wr.caveat:
            details["caveat"] = wr.caveat
        if wr.phases_s:
            details["phases_s"] = wr.phases_s
        if not wr.ok and wr.status in _LOGGED:
            tail = log_tail(Path(wr.log)) if wr.log else []
            if tail:
                details["log_tail"] = tail
        return details

    def evaluate(self, target: Target, wr: WorkerResult, wdir: Path) -> Evaluated:
        t = self.thresholds_for(target)
        is_ref = target.id == self.reference
        outs = load_outputs(wdir / "outputs.npz", self.out_names) if wr.ok else {}
        if is_ref and wr.ok:
            self.score_name = self.opts.scores_output or acc.score_output(outs)
        rob = self.robustness
        extra = load_outputs(wdir / "extra_outputs.npz", self.out_names) if wr.ok and rob else {}
        ref, labels, cut = self.ref_outputs, self.feeds.labels, (wr.details or {}).get("samples")
        ref_metrics = self.ref_metrics
        if cut and not is_ref:  # a slow target compared the first batches only: so is the reference
            ref = {n: v[:cut["batches"]] for n, v in ref.items()}
            labels = labels[:cut["batches"]] if labels is not None and len(labels) == cut["of"] else labels
            ref_metrics = dict(ref_metrics, accuracy=acc.accuracy(ref, labels, self.score_name))
        gen = _generation(wdir) if wr.ok else None
        if is_ref:
            self.ref_generation = gen
        ev = Evaluation(worker=wr, outputs=outs, reference=None if is_ref else ref,
                        generation=gen, reference_generation=None if is_ref else self.ref_generation, thresholds=t,
                        output_names=self.out_names, labels=labels, score_name=self.score_name,
                        reference_metrics=ref_metrics, perturbed=rob.set if rob else None, perturbed_outputs=extra,
                        reference_perturbed=None if is_ref else self.ref_perturbed,
                        adversarial=rob.adversarial if rob else None)
        if wr.ok:
            self.outputs[target.id] = outs
            m, problems = metrics.evaluate(ev)
            found = None if is_ref else problems + metrics.breaches(m, t)
        else:
            m, found = dict(metrics.empty(), latency_ms=summarize(wr.latency), peak_rss_mb=wr.peak_rss_mb), None
        if is_ref and wr.ok:
            self.ref_outputs, self.ref_metrics, self.ref_perturbed = outs, m, extra
        cal = self._calibration(target, wr)
        return Evaluated(worker=wr, metrics=m, thresholds=t, found=found,
                         notes=(*samples_note(wr.details), *timing_note(m), *artifact_notes(wr.details),
                                *((calibration.note(cal),) if cal else ())),
                         details={**self._details(wr), **({"plan": self.plans[target.id]} if target.id in self.plans else {}),
                                  **({"calibration": cal} if cal else {})},
                         hint=wr.hint or (None if wr.ok else fix_hint(wr.op, [c for c, _ in target.converters])))

    def _calibration(self, target: Target, wr: WorkerResult) -> dict | None:
        """The target's ``details.calibration`` (``report/calibration.py``) where it calibrates, else None."""
        meta = (wr.details or {}).get("artifact_meta") or {}
        said = "calibration" in meta or "calibration_source" in meta
        cal = calibration.describe(meta, self.calibration, said or _calibrates(target))
        if cal:
            self.calibrated[target.id] = cal
        return cal

    def reference_tokens(self) -> list[int] | None:
        """The tokens the reference generated (``--generate``), to feed the others under teacher forcing."""
        return [int(x) for x in self.ref_generation["tokens"]] if self.ref_generation else None

    def calibration_notes(self) -> list[str]:
        """The check's notes on calibration: synthesized samples warned about, a dataset's held-out share."""
        return calibration.check_notes(self.calibration, self.calibrated)


def _calibrates(target: Target) -> bool:
    """Whether a step of the target's route calibrates (``Converter.uses_calibration``)."""
    from portability.core.target import load_class

    try:
        return any(getattr(load_class(path), "uses_calibration", False) for path, _ in target.converters)
    except Exception:  # noqa: BLE001 - a converter that cannot be imported here calibrates nothing here
        return False


def _generation(wdir: Path) -> dict | None:
    """A worker's ``generation.npz`` (``--generate``), or None where it decoded nothing."""
    path = wdir / "generation.npz"
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
