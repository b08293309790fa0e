"""The study: plan (framework × architecture × dataset), train (cached), deploy through ``check``, and
collect one row per model — a model whose training or export failed is still a row, with its status.

The study's JSON (``StudyResult.to_dict``) holds every check report it ran plus its own rows; the tables
(``portability.study.tables``) are computed from that JSON alone.
"""
from __future__ import annotations

import platform
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from portability.core.errors import UsageError
from portability.core.status import Status
from portability.study import rows, zoo

STUDY_SCHEMA = 1

#: the targets each profile deploys to when --targets is not given: every platform in full; in quick,
#: each platform's main runtimes (the reference of each source is added by check itself)
DEFAULT_TARGETS = {
    "quick": "server/ort-cpu,server/tf,web/ort-wasm,web/tfjs-wasm,web/litert-js,"
             "mobile/tflite-fp32,mobile/tflite-int8,mobile/ort-mobile,mobile/arm64-tflite",
    "full": "server,web,mobile",
    "step": "server/ort-cpu",
}
#: held-out samples each emulated target (ARM64 under qemu, some hundred times slower than the host) is
#: evaluated on: the first N of the row's samples, in a check of their own (the report says so)
EMULATED_SAMPLES = {"quick": 50, "full": 100, "step": 8}
#: latency sampling per profile (check's --warmup, --runs, --time-budget): a study times a dozen models
#: on every target, so each target gets a few seconds at most (the report gives each one's run count)
TIMING = {"quick": (3, 20, 3.0), "full": (5, 30, 5.0), "step": (1, 5, 2.0)}
#: what a row's deployment adds to it (kept in the study's state: a resumed row takes these)
DEPLOYED = ("check", "check_emulated", "reference", "targets", "seconds")
#: what a profile does unless told otherwise: the full profile is the study as a study (three seeds, robustness,
#: every drift localized, and the same-weights experiment when PyTorch and another framework are in it)
PROFILE_DEFAULTS = {"full": {"seeds": 3, "robustness": True, "same_weights": True, "localize": True}}


@dataclass
class StudyOptions:
    frameworks: list[str] | None = None
    archs: list[str] | None = None
    datasets: list[str] | None = None
    targets: str | None = None
    profile: str = "quick"
    seed: int = 0
    #: trainings per (framework, model, dataset), with seeds seed, seed+1, …: the tables give mean ± std
    #: (None: the profile's default, ``PROFILE_DEFAULTS``)
    seeds: int | None = None
    cache_dir: Path | None = None
    retrain: bool = False
    jobs: int | None = None
    #: robustness on every target (check --robustness); None: the profile's default
    robustness: bool | None = None
    #: localize every drifting target (``portability localize``): its first diverging op in the row and tables
    localize: bool | None = None
    #: also load each PyTorch model's trained weights into the Keras and MXNet definitions (no training) and
    #: deploy those: rows with ``weights: "torch"`` and ``same_weights`` (their logits against PyTorch's)
    same_weights: bool | None = None


@dataclass
class StudyResult:
    options: dict
    started_at: str
    environment: dict
    datasets: dict
    rows: list[dict] = field(default_factory=list)
    seconds: dict = field(default_factory=lambda: {"train": 0.0, "check": 0.0, "data": 0.0, "total": 0.0})
    planned: int = 0  # rows the study will have

    def to_dict(self) -> dict:
        d = {"study_schema": STUDY_SCHEMA, "kind": "portability-study", "started_at": self.started_at,
             "options": self.options, "environment": self.environment, "datasets": self.datasets,
             "seconds": {k: round(v, 2) for k, v in self.seconds.items()}, "rows_planned": self.planned, "rows": self.rows}
        # the study's cost from scratch, over every run that did a part of it (a resumed study's own
        # ``total`` counts only what it did itself)
        d["seconds"]["from_scratch"] = round(self.seconds["data"] + sum(
            (r.get("seconds") or {}).get(k) or 0.0 for r in self.rows for k in ("train", "deploy")), 1)
        return derive(d)


def derive(d: dict) -> dict:
    """The study's sections computed from its rows alone (``across_seeds``, ``robustness_moves``,
    ``same_weights``, ``findings``): also how ``study --tables`` reads a JSON written by an earlier version."""
    from portability.study.findings import findings
    from portability.study.stats import across_seeds, robustness_moves, same_weights

    d["across_seeds"] = across_seeds(d)
    if d["options"].get("robustness"):
        d["robustness_moves"] = robustness_moves(d)
    if d["options"].get("same_weights"):
        d["same_weights"] = same_weights(d)
    d["findings"] = findings(d)  # last: it reads the sections above
    return d


class Progress:
    """What the study tells while it works (the CLI prints it)."""
    def stage(self, text: str) -> None: ...
    def training(self, event: dict) -> None: ...
    def check_progress(self): return None
    def row_done(self, row: dict) -> None: ...
    def so_far(self, result: "StudyResult") -> None:
        """After each row: the study as it stands (the CLI keeps its JSON current)."""


def validate(o: StudyOptions) -> list[tuple[str, str, str]]:
    """The (framework, arch, dataset) cells the options ask for; UsageError on an unknown name."""
    s = zoo.spec()

    def names(given, known, what):
        if not given:
            return list(known)
        bad = [g for g in given if g not in known]
        if bad:
            raise UsageError(f"unknown {what} '{bad[0]}' (known: {', '.join(known)})")
        return list(given)

    if o.profile not in s.PROFILES:
        raise UsageError(f"unknown profile '{o.profile}' (known: {', '.join(s.PROFILES)})")
    fws = names(o.frameworks, s.FRAMEWORKS, "framework")
    archs = names(o.archs, list(s.ARCHS), "model")
    datasets = names(o.datasets, list(s.DATASETS), "dataset") if o.datasets else None
    cells = [(f, a, d) for a, d in s.pairs(archs, datasets) for f in fws]
    if not cells:
        raise UsageError("no model fits those datasets (image models take mnist/fashion, lstm takes rotten)")
    if o.same_weights and ("torch" not in fws or len(fws) < 2):
        raise UsageError("--same-weights loads PyTorch's trained weights into the other frameworks: give torch and keras and/or mxnet")
    return cells


def _can_share(o: StudyOptions) -> bool:
    """Whether the same-weights experiment has something to compare: PyTorch and another framework."""
    fws = o.frameworks or zoo.spec().FRAMEWORKS
    return "torch" in fws and len(fws) > 1


def _environment() -> dict:
    from importlib import metadata

    def v(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), "machine": platform.machine(), "system": platform.platform(),
            "packages": {p: v(p) for p in ("portability", "torch", "keras", "tensorflow-cpu", "onnx", "onnxruntime",
                                           "onnx2tf", "tf2onnx", "tensorflowjs", "ai-edge-litert", "playwright")}}


def run_study(o: StudyOptions, progress: Progress | None = None) -> StudyResult:
    """Every cell of the study, one row each (see the module docstring)."""
    return _Study(o, progress or Progress()).run()


class _Study:
    def __init__(self, o: StudyOptions, progress: Progress):
        from dataclasses import replace

        from portability.core.dirs import default_root
        from portability.audit.corpus import State

        given = PROFILE_DEFAULTS.get(o.profile, {})
        o = replace(o, seeds=o.seeds or given.get("seeds", 1),
                    robustness=given.get("robustness", False) if o.robustness is None else o.robustness,
                    localize=given.get("localize", False) if o.localize is None else o.localize,
                    same_weights=bool(given.get("same_weights")) and _can_share(o) if o.same_weights is None else o.same_weights)
        self.o, self.progress = o, progress
        self.cells = validate(o)
        root = zoo.zoo_root()
        if str(root.parent) not in sys.path:
            sys.path.insert(0, str(root.parent))
        self.cache_root = Path(o.cache_dir) if o.cache_dir else default_root()
        self.cache = self.cache_root / "study"
        self.targets = o.targets or DEFAULT_TARGETS[o.profile]
        self.timing = TIMING[o.profile]
        s = zoo.spec()
        self.result = StudyResult(
            options={"frameworks": sorted({c[0] for c in self.cells}, key=s.FRAMEWORKS.index),
                     "models": sorted({c[1] for c in self.cells}), "datasets": sorted({c[2] for c in self.cells}),
                     "targets": self.targets, "profile": o.profile, "seed": o.seed, "seeds": o.seeds, "robustness": o.robustness, "localize": o.localize,
                     "same_weights": o.same_weights,
                     "zoo": str(root)},
            started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), environment=_environment(), datasets={})
        self.data_paths: dict[str, Path | None] = {}
        self.state = State(self.cache / "rows")  # finished rows, one file each, written atomically
        self.session = None
        self.localized: dict[tuple, dict] = {}  # (framework, arch, dataset, weights, target) -> its first localization

    def run(self) -> StudyResult:
        """Every row, in one session (``engine/session.py``: the browsers, the ARM64 emulator and the warm
        worker pool start once for the whole study); a row already checked with the same model and settings
        (``_row_key``) comes from the study's state, as an audit's models do: a stopped study resumes."""
        from portability.core.sandbox import default_mode
        from portability.engine.session import Session

        t_all = time.perf_counter()
        for d in sorted({c[2] for c in self.cells}):
            self._dataset(d)
        seeds = range(self.o.seed, self.o.seed + max(1, self.o.seeds))
        # one round per seed (a study stopped midway has whole rounds); in each, the same-weights rows (PyTorch's
        # weights in the other frameworks) after every own-weights row
        runs = [(c, seed, w) for seed in seeds for w in ("own", "torch")[: 1 + bool(self.o.same_weights)]
                for c in self.cells if w == "own" or c[0] != "torch"]
        self.result.planned = len(runs)
        with Session(default_mode(), (str(self.cache / "models"),)) as self.session:
            for i, ((fw, arch, d), seed, weights) in enumerate(runs, 1):
                row = {"framework": fw, "arch": arch, "dataset": d, "profile": self.o.profile, "seed": seed, "weights": weights,
                       "training": {"status": Status.SKIPPED}, "export": None, "baseline": None, "check": None, "targets": []}
                label = f"[{i}/{len(runs)}] {fw} {arch} on {d}" + (f", seed {seed}" if self.o.seeds > 1 else "") + \
                    (" with PyTorch's weights" if weights == "torch" else "")
                self._cell(row, label, {"torch": "torch", "keras": "keras", "mxnet": "onnx"}[fw])
                self.result.rows.append(row)
                self.progress.row_done(row)
                if i < len(runs):
                    self.result.seconds["total"] = time.perf_counter() - t_all
                    self.progress.so_far(self.result)
        self.result.seconds["total"] = time.perf_counter() - t_all
        return self.result

    def _dataset(self, d: str) -> None:
        from models import data as zoo_data

        t0 = time.perf_counter()
        self.progress.stage(f"dataset {d}")
        try:
            self.data_paths[d] = zoo_data.prepare(d, self.cache / "data")
            self.result.datasets[d] = zoo_data.provenance(d, self.cache / "data")
        except zoo_data.DataUnavailable as e:
            self.data_paths[d] = None
            self.result.datasets[d] = {"name": d, "error": str(e)}
        self.result.seconds["data"] += time.perf_counter() - t0

    def _cell(self, row: dict, label: str, source_format: str) -> None:
        """Fill one row: train (or reuse), then deploy; whatever stops it gives every target its status."""
        fw, arch, d = row["framework"], row["arch"], row["dataset"]
        if self.data_paths[d] is None:
            why = self.result.datasets[d]["error"]
            row["training"] = {"status": Status.SKIPPED, "error": why}
            row["targets"] = rows.failed_row_targets(source_format, self.targets, Status.SKIPPED, why)
            return
        self.progress.stage(f"{label}: " + ("loading PyTorch's weights" if row["weights"] == "torch" else "training"))
        t0 = time.perf_counter()
        try:
            source = None
            if row["weights"] == "torch":  # PyTorch's model of the same seed (trained, or from the cache)
                source = zoo.train("torch", arch, d, self.data_paths[d], self.o.profile, row["seed"], self.cache,
                                   on_event=self.progress.training)
            trained = zoo.train(fw, arch, d, self.data_paths[d], self.o.profile, row["seed"], self.cache,
                                on_event=self.progress.training, retrain=self.o.retrain,
                                weights_from=source.dir / "weights.npz" if source else None)
        except zoo.TrainingFailed as e:
            status = Status.SKIPPED if zoo.python_for(fw)[0] is None else "error"
            row["training"] = {"status": status, "error": str(e)}
            row["targets"] = rows.failed_row_targets(source_format, self.targets, Status.SKIPPED, f"{fw} {arch}: training {status}: {e}")
            return
        finally:
            self.result.seconds["train"] += time.perf_counter() - t0
        rows.record_training(row, trained)
        if source is not None:
            row["same_weights"] = rows.against_source(trained, source)
        if not trained.exported:
            why = f"{fw} export failed: {row['export'].get('error') or 'no model file'}"
            row["targets"] = rows.failed_row_targets(source_format, self.targets, Status.CONVERT_ERROR, why)
            return
        key = self._row_key(row, trained)
        done = None if self.o.retrain else self.state.get(key)
        t0 = time.perf_counter()
        if done is not None:  # the deployment's results; what training recorded is this run's
            row.update({k: v for k, v in done.items() if k in DEPLOYED}, resumed=True)
            row["baseline"].update({k: v for k, v in (done.get("baseline") or {}).items() if k not in row["baseline"]})
            self._summarize(row, trained)
        else:
            self.progress.stage(f"{label}: deploying")
            try:
                self._deploy(row, trained, source_format)
            except UsageError as e:
                row["check"] = {"error": str(e)}
                row["targets"] = rows.failed_row_targets(source_format, self.targets, Status.LOAD_ERROR, f"check refused the model: {e}")
        localized = self._localize_drifts(row, trained) if self.o.localize else 0
        spent = time.perf_counter() - t0
        self.result.seconds["check"] += spent
        # what the row cost, whichever run did it: training, then deployment and localization
        row["seconds"] = {"train": round((trained.meta.get("train_seconds") or 0.0) + ((trained.meta.get("export") or {}).get("seconds") or 0.0), 2),
                          "deploy": round(((done or {}).get("seconds") or {}).get("deploy", 0.0) + spent, 2)}
        if done is None or localized:
            self.state.put(key, {k: v for k, v in row.items() if k in DEPLOYED or k == "baseline"})

    def _row_key(self, row: dict, trained) -> str:
        """What identifies a finished row: the trained model (its cache entry's name holds the zoo code's
        digest, and the file's own digest), the deployment's settings and this version of portability."""
        import hashlib
        import json

        import portability
        from portability.core.artifact import sha256_files

        doc = {"model": trained.dir.name, "sha256": sha256_files([trained.model]), "targets": self.targets,
               "timing": self.timing, "robustness": self.o.robustness, "seed": self.o.seed,
               "emulated_samples": EMULATED_SAMPLES[self.o.profile], "weights": row["weights"], "version": portability.__version__}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]

    def _deploy(self, row: dict, trained, source_format: str) -> None:
        """Check the model on the row's targets; emulated ones on the first samples, in a check of their own."""
        from portability.sources import load_source_isolated

        main_spec, emu_spec = rows.split_emulated(source_format, self.targets)
        n_emu = min(EMULATED_SAMPLES[self.o.profile], int(trained.meta.get("eval_samples") or 0))
        info = load_source_isolated(trained.model)
        report = self._check(trained, info, main_spec)
        emu_report = self._check(trained, info, emu_spec, samples=n_emu) if emu_spec else None
        row["check"], row["reference"] = report, report["reference"]
        if emu_report is not None:
            row["check_emulated"] = emu_report
            row["baseline"]["accuracy_emulated_samples"] = rows.baseline_on(trained, n_emu)
        self._summarize(row, trained)

    def _summarize(self, row: dict, trained) -> None:
        """The row's targets from its check reports (a resumed row's too: the tables read what this version
        makes of the reports), each against the framework's own accuracy on the samples it was compared on;
        a target's localization is kept."""
        report, emu = row.get("check") or {}, row.get("check_emulated")
        if "targets" not in report:
            return
        kept = {t["id"]: t["localized"] for t in row.get("targets") or [] if t.get("localized")}
        full, seen = (report.get("inputs") or {}).get("samples"), {}

        def on_first(n):
            if n not in seen:
                seen[n] = row["baseline"]["accuracy"] if n == full else rows.baseline_on(trained, n)
            return seen[n]
        targets = rows.summarize_check(report, on_first) + (rows.summarize_check(emu, on_first)[1:] if emu else [])
        for t in targets:
            if t["id"] in kept:
                t["localized"] = kept[t["id"]]
        row["targets"] = targets

    def _localize_drifts(self, row: dict, trained) -> int:
        """Give each drifting target of the row its first diverging op (``localized``); how many were added.
        A (framework, model, dataset, weights, target) is localized once, on the first seed where it drifts:
        later seeds' drifts of it carry that result (its ``seed`` says whose model it was)."""
        added = 0
        for t in row["targets"]:
            k = (row["framework"], row["arch"], row["dataset"], row.get("weights"), t["id"])
            if t.get("localized"):
                self.localized.setdefault(k, t["localized"])
            elif t["status"] == Status.DRIFT and t["id"] != row["reference"]:
                if k not in self.localized:
                    self.localized[k] = dict(self._localize(row, trained, t["id"]), seed=row["seed"])
                t["localized"], added = self.localized[k], added + 1
        return added

    def _localize(self, row: dict, trained, tid: str) -> dict:
        """The first diverging op of a drifting target (``localize`` on the row's samples, at most 16)."""
        from portability import api
        from portability.explain import localize

        self.progress.stage(f"{row['framework']} {row['arch']}: localizing {tid}")
        opts = api.options(tid, dataset=trained.eval_data, samples=16, runs=0, seed=self.o.seed, cache_dir=self.cache_root)
        out = self.cache / "localize" / f"{row['framework']}-{row['arch']}-{row['dataset']}-s{row['seed']}" / tid.replace("/", "_")
        try:
            doc = localize.run(Path(trained.model), tid, opts, out)
        except UsageError as e:
            return {"why": str(e)}
        first = doc.get("first_divergence")
        if not first:
            return {"why": doc.get("why") or "nothing localized", "method": doc.get("method")}
        return {"node": first.get("node"), "op_type": first.get("op_type"), "op_at_fault": first.get("op_at_fault"),
                "method": doc.get("method"), "reproduces": (doc.get("reproducer") or {}).get("reproduces"),
                **({"localized_on": doc["source"]["localized_on"]} if doc.get("source") else {})}

    def _check(self, trained, info, spec: str, samples: int | None = None) -> dict:
        from portability import api
        from portability.engine.pipeline import check as run_check

        warmup, runs, budget = self.timing
        extra = {"robustness": True} if self.o.robustness else {}
        if samples:
            extra["samples"] = samples
        if self.o.jobs:
            extra["jobs"] = self.o.jobs
        opts = api.options(spec, dataset=trained.eval_data, warmup=warmup, runs=runs, time_budget=budget,
                           sample_budget=0,  # accuracy on every evaluation sample (slow-by-nature targets keep theirs)
                           calibrate_on_eval=True,  # every one: the baselines are the framework's on all of eval.npz
                           seed=self.o.seed, cache_dir=self.cache_root, **extra)
        return run_check(trained.model, opts, self.progress.check_progress(), model=info, session=self.session).to_dict()
