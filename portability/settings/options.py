"""A check's settings, declared once, and the one function that resolves them into ``CheckOptions``.

Each ``Setting`` below (``settings/setting.py``) is one of the user's settings: its name is the ``[tool.portability]`` key, the
keyword argument of ``portability.check()`` and, dashed, the ``check`` flag (``time_budget``,
``--time-budget``); it carries its type, its default, its help text (``{default}`` is filled in from the
default), the commands that take it as a flag, the types a settings file may give, and how its value is
read into ``CheckOptions``. The command line (``cli/options.py``), settings files (``settings/config.py``),
audit manifests, the Python API and the help texts all read this list; thresholds come from the metrics
(``metrics.base.Threshold``). Adding a setting is one entry here, one ``CheckOptions`` field and its use.

Light module: no numpy, no heavy import.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from portability.core.errors import UsageError
from portability.core.limits import Limits
from portability.settings.readers import (MEMORY_SHARE, _gate, _jobs, _memory, _number, _path, _prompt, _range,
                                          _resident, _sandbox, _shapes, _tables, _targets, _versions, default_jobs)  # noqa: F401
from portability.settings.setting import INPUTS, RUNNING, THRESHOLDS, WHAT, Setting


@dataclass
class CheckOptions:
    """A check's settings, resolved and typed (``resolve``); the engine reads only these."""

    targets: str
    inputs: Path | None
    dataset: Path | None
    shapes: list[str]
    samples: int | None
    seed: int
    value_range: tuple[float, float]
    warmup: int
    runs: int
    #: seconds a target's latency sampling may take; a slow target gets fewer runs (the report says)
    time_budget_s: float
    #: seconds a target's correctness batches may take; a slower target compares fewer (the report says)
    sample_budget_s: float
    limits: Limits
    #: "+id"/"id" makes a target (or platform) gating, "-id" a cross-check
    gate: list[str]
    use_cache: bool
    cache_dir: Path | None
    #: targets worked on at once (their timing is always alone: ``engine.schedule``)
    jobs: int
    #: a format (``onnx``) or converter (``OnnxFromTorchScript``) every planned chain must pass through
    via: str | None
    #: the robustness pass: perturbed (and, for a differentiable source, adversarial) inputs on every target
    robustness: bool
    #: the first rows of the inputs it perturbs
    robustness_samples: int
    #: the OS sandbox of every process that reads or runs the model: auto, require, off (``core.sandbox``)
    sandbox: str
    #: where the shared services come from: "auto" (the resident session, started if none runs) or "off"
    resident: str
    #: {package: [versions]}: the targets using a package run once more per version (``portability.matrix``)
    versions: dict
    #: the output read as class scores for accuracy and robustness (None: the first that looks like scores)
    scores_output: str | None
    #: after the check, localize every drifting target (``explain/localize.py``): reproducers go here
    localize: Path | None
    #: after the check, search for a conversion or runtime option under which each failing target passes
    fix: bool
    #: options added to planned steps, by converter class name (``{"SavedModelFromOnnx": {"args": ["-nuo"]}}``)
    converter_options: dict
    #: options added to a target's runtime, by target id (``{"server/ort-cpu": {"graph_optimization": "basic"}}``)
    runtime_options: dict
    #: global threshold overrides, then per-target ones ({target id: {name: bound}}) — user settings
    thresholds: dict = field(default_factory=dict)
    target_thresholds: dict = field(default_factory=dict)
    #: the user set the run time limit: it then applies also to targets with a limit of their own
    timeout_explicit: bool = False
    #: a target whose nodes did not all run on the backend it asked for is a ``fallback``
    strict_backend: bool = False
    #: ``--shape-grid``: NAME=DIMS,DIMS,... (``engine/grid.py``: one check per shape, the first one converting)
    shape_grid: list[str] = field(default_factory=list)
    #: {input: dims} the converters get instead of the feeds' shapes (a grid's further shapes reuse the first's)
    convert_shapes: dict | None = None
    #: the feeds file the converters calibrate on instead of the check's own feeds (a grid's further shapes: the
    #: first's, so that the artifacts they run are the ones converted at the first shape)
    calibration_feeds: str | None = None
    #: ``--calibration``: the user's calibration samples (laid out as ``--dataset``'s; labels not needed) for the
    #: converters that calibrate (static int8), kept apart from the evaluated samples (``engine/prepare.py``)
    calibration: Path | None = None
    #: ``--calibrate-on-eval``: calibrate on the evaluated ``--dataset`` samples instead of a held-out share of them
    calibrate_on_eval: bool = False
    #: time targets whose speed is no device's too (a software GPU adapter, an emulator): not by default
    time_emulated: bool = False
    #: greedy decoding of this many tokens on every target after the single pass (0: none): a decoder's
    #: tokens compared step by step with the reference's (``core/generate.py``, ``metrics/generation.py``)
    generate: int = 0
    #: the prompt's token ids (empty: a seeded prompt of the model's vocabulary)
    prompt_ids: tuple[int, ...] = ()
    #: an encoder-decoder's encoder (Optimum's ``encoder_model.onnx``): run once per prompt on every target, its
    #: outputs fed to each step of the decoder (the checked model) under ``--generate``
    encoder: Path | None = None


_AUDIT = ("check", "audit")
#: settings of the checks ``localize`` runs (what to feed, how to run, the bounds)
_LOCAL = ("check", "localize", "fix")
_ALL_CMDS = ("check", "audit", "localize", "fix")
#: settings of the checks ``fix`` and ``quantize-report`` run besides those: accuracy and calibration
_EVAL = ("check", "audit", "fix")

SETTINGS: tuple[Setting, ...] = (
    Setting("targets", str, "server", "Comma-separated platforms (server, web, mobile, all) or exact target ids "
            "(web/ort-wasm). Default: {default}. The reference server/ort-cpu always runs.", WHAT, parse=_targets,
            short="-t", commands=_AUDIT, file=(str, list)),
    Setting("via", str, None, "Route every target's conversion through this format (onnx, saved_model...) or "
            "converter (OnnxFromTorchScript): compare with the native routes of a run without it.", WHAT,
            parse=lambda v, s: str(v) if v else None),
    Setting("gate", list, None, "Make targets/platforms gating (ID) or cross-checks (-ID); comma-separated, "
            "repeatable.", WHAT, parse=_gate, file=(list, str)),
    Setting("versions", list, None, "PACKAGE=V1,V2 (repeatable): run the targets that use PACKAGE once more per "
            "version, each in an environment of its own built once in the cache, as TARGET@VERSION cross-checks, "
            "with a versions x targets table. Packages: onnxruntime, onnxruntime-web, tensorflow, ai-edge-litert, "
            "onnx2tf, tensorflowjs, @tensorflow/tfjs.", WHAT, parse=_versions, file=(list, dict)),
    Setting("robustness", bool, False, "Also run seeded perturbed inputs (noise, brightness/contrast, id "
            "substitutions) and, for a .pt2/.keras source, FGSM/PGD examples on every target: accuracy and flip "
            "rate against the reference per level.", WHAT, parse=lambda v, s: bool(v),
            flag="--robustness/--no-robustness"),
    Setting("generate", int, 0, "Greedy decoding of N tokens on every target after the single pass, the cache fed "
            "back step by step, for a causal language model's decoder (Optimum's layout): tokens matched with the "
            "reference, the first divergent step, the logits' drift under teacher forcing, time to first token and "
            "tokens/s.", WHAT, parse=_number(int), min=0, commands=("check",)),
    Setting("prompt_ids", str, None, "The prompt of --generate as token ids, comma-separated (default: four seeded "
            "ids of the model's vocabulary).", WHAT, parse=_prompt, commands=("check",), file=(str, list)),
    Setting("encoder", Path, None, "An encoder-decoder's encoder (Optimum's encoder_model.onnx) for --generate on its "
            "decoder: each target converts and runs it once per prompt (--prompt-ids: the encoder's input ids), its "
            "last_hidden_state fed to every decoder step, which starts from the decoder_start_token_id of a "
            "config.json beside the decoder (else 0, T5's).", WHAT, parse=_path, path=True, commands=("check",),
            file=(str,)),
    Setting("localize", Path, None, "After the check, localize every target that drifts (as `portability localize` "
            "does: its first diverging node, the drift curve and a reproducer, in details.localize); the reproducers "
            "go to this folder. ONNX models only.", WHAT, parse=_path, path=True, file=(str,)),
    Setting("robustness_samples", int, 64, "How many of the first input rows the robustness pass perturbs "
            "(default {default}).", WHAT, parse=_number(int), min=1),
    Setting("inputs", Path, None, ".npz with one array per model input (one batch, or a stack of batches).",
            INPUTS, parse=_path, commands=_ALL_CMDS, path=True),
    Setting("dataset", Path, None, ".npz with 'x' (or one array per input) and integer labels 'y': adds task "
            "accuracy.", INPUTS, parse=_path, commands=_EVAL, path=True),
    Setting("calibration", Path, None, ".npz of calibration samples for the variants that calibrate (static int8: "
            "server/ort-qdq, web/ort-wasm-qdq, mobile/tflite-int8), laid out as --dataset's ('x' or one array per "
            "input; no labels needed), kept apart from the evaluated samples. Default: with --dataset, its last "
            "min(64, n/5) samples, held out from evaluation; else the synthesized inputs, with a warning.", INPUTS,
            parse=_path, commands=_EVAL, path=True),
    Setting("calibrate_on_eval", bool, False, "Calibrate on the evaluated --dataset samples themselves instead of "
            "holding out a share of them for calibration (the report says so).", INPUTS, parse=lambda v, s: bool(v),
            flag="--calibrate-on-eval/--no-calibrate-on-eval", commands=_EVAL),
    Setting("shapes", list, None, "Fix dynamic dims: NAME=1x3x224x224 (repeatable). Default: leading dim 1, others "
            "32, with a warning. The converters get them too.", INPUTS, parse=_shapes, flag="--shape",
            commands=_ALL_CMDS, file=(list, dict)),
    Setting("shape_grid", list, None, "NAME=DIMS,DIMS,... (repeatable; the lists zipped, all of one length): check "
            "at each shape in turn. Every target is converted at the first shape only, then its artifact is run at "
            "the others as TARGET~NAME=DIMS, with a shapes x targets table: a converter that fixed a dynamic axis "
            "shows there.", INPUTS, parse=lambda v, s: [v] if isinstance(v, str) else list(v or []),
            file=(list, str)),
    Setting("scores_output", str, None, "The output that holds class scores, for accuracy with --dataset and for "
            "robustness (default: {default}).", INPUTS, commands=_AUDIT, shown="the first [batch, classes] float output"),
    Setting("samples", int, None, "Synthesized batches (default 8), or the most dataset samples to use (default "
            "all).", INPUTS, parse=_number(int), min=1, commands=_ALL_CMDS),
    Setting("seed", int, 0, "Seed of synthesized inputs (default {default}).", INPUTS, parse=_number(int), commands=_LOCAL),
    Setting("input_range", str, (0.0, 1.0), "LOW,HIGH of synthesized float inputs (default {default}).", INPUTS,
            into="value_range", parse=_range, file=(str, list), commands=_LOCAL),
    Setting("time_emulated", bool, False, "Also time targets whose speed is no device's: a software GPU adapter "
            "(SwiftShader), an emulator (qemu) or the ONNX reference evaluator. By default they are converted, run and compared, not timed.",
            RUNNING, parse=lambda v, s: bool(v), flag="--time-emulated/--no-time-emulated", commands=_AUDIT),
    Setting("warmup", int, 10, "Untimed runs before timing (default {default}).", RUNNING, parse=_number(int), min=0),
    Setting("runs", int, 50, "Timed runs for latency percentiles (default {default}; 0 skips timing).", RUNNING,
            parse=_number(int), min=0, commands=_AUDIT),
    Setting("time_budget", float, 20.0, "Seconds a target's latency sampling may take (default {default}): a slow "
            "target gets fewer runs (at least 5), and the report says how many.", RUNNING, into="time_budget_s",
            parse=_number(float), min=0),
    Setting("sample_budget", float, 30.0, "Seconds a target's correctness batches may take (default {default}): a "
            "target whose inference is slower compares the batches that fit at its pace (at least one) against the "
            "reference's same batches, and the report says how many; 0 compares every batch. Emulated and "
            "software-GPU targets keep their own 20 s.", RUNNING, into="sample_budget_s",
            parse=_number(float), min=0),
    Setting("timeout", float, 300.0, "Seconds a target may take from loading to its last timed run (default "
            "{default}).", RUNNING, into="limits.run_timeout_s", parse=_number(float), min=1, commands=_LOCAL),
    Setting("convert_timeout", float, 900.0, "Seconds a target's conversions may take (default {default}).",
            RUNNING, into="limits.convert_timeout_s", parse=_number(float), min=1, commands=_LOCAL),
    Setting("memory_limit_mb", float, None, "Kill a target whose processes use more memory (default: "
            "{default}).", RUNNING, into="limits.memory_mb", parse=_memory, shown=f"{MEMORY_SHARE:.0%} of RAM"),
    Setting("jobs", int, None, "Targets converted, loaded and run at once after the reference (default: "
            "{default}). Latency is always sampled with nothing else running.", RUNNING, parse=_jobs, short="-j",
            min=1, commands=_AUDIT + ("study",), shown="the number of cores + 1"),
    Setting("strict_backend", bool, False, "Fail a target (status fallback) whose nodes did not all run on the backend "
            "it asked for (LiteRT's XNNPACK delegate, ONNX Runtime's execution provider; placement in details); ONNX "
            "Runtime then also refuses a CPU fallback of a GPU provider. Default: {default} (placement is reported only).",
            RUNNING, parse=lambda v, s: bool(v), flag="--strict-backend/--no-strict-backend", commands=_AUDIT),
    Setting("use_cache", bool, True, "Convert afresh and keep nothing in the artifact cache.", RUNNING,
            parse=lambda v, s: bool(v), flag="--no-cache", negate=True, commands=_LOCAL),
    Setting("cache_dir", Path, None, "Artifact cache (default {default}).", RUNNING, parse=_path,
            commands=("check", "study", "localize", "fix"), path=True, shown="$PORTABILITY_CACHE_DIR or ~/.cache/portability"),
    Setting("sandbox", str, None, "The OS sandbox of every process that reads or runs the model (no network, the "
            "model's folder read-only, writes only to its own work folder): auto (where the kernel can; says once "
            "where it cannot), require (an error where it cannot), off. Default: $PORTABILITY_SANDBOX, else "
            "{default}.", RUNNING, parse=_sandbox, commands=_ALL_CMDS, shown="auto"),
    Setting("resident", str, None, "Where the browsers and the ARM64 emulator come from: auto (the resident "
            "session, kept between checks and started by the first one; `portability serve --stop` stops it), off "
            "(this check starts and stops its own). Default: $PORTABILITY_RESIDENT, else {default}.", RUNNING,
            parse=_resident, commands=_ALL_CMDS, shown="auto"),
    Setting("thresholds", dict, None, "Bounds by name, and tables of them per target id.", THRESHOLDS, flag=""),
    Setting("fix", bool, False, "After the check, retry each failing target with a bounded list of documented "
            "alternatives (onnx2tf options, ONNX Runtime optimization levels) and report the first that passes, with "
            "the setting to use (details.fix).", WHAT, parse=lambda v, s: bool(v), flag="--fix/--no-fix"),
    Setting("converter_options", dict, None, "Options added to a converter's step, by converter name (a settings "
            "file's [converter_options.SavedModelFromOnnx] args = [\"-rtpo\", \"Erf\"]: onnx2tf's options; what --fix "
            "reports).", RUNNING, parse=lambda v, s: _tables(v, s), flag=""),
    Setting("runtime_options", dict, None, "Options added to a target's runtime, by target id (a settings file's "
            "[runtime_options.\"server/ort-cpu\"] graph_optimization = \"basic\").", RUNNING,
            parse=lambda v, s: _tables(v, s), flag=""),
)


def _threshold_settings() -> tuple[Setting, ...]:
    """A flag for each threshold a metric gives one (``--max-abs``: the setting ``max_abs``)."""
    from portability.metrics import threshold_flags

    out = []
    for name, t in threshold_flags().items():
        out.append(Setting(t.flag.lstrip("-").replace("-", "_"), float, t.default, f"Threshold: {t.help} "
                           "(default {default}).", THRESHOLDS, flag=t.flag, file=(), threshold=name, commands=_LOCAL,
                           shown=f"{t.default:g}"))
    return tuple(out)


_ALL: tuple[Setting, ...] | None = None


def settings() -> tuple[Setting, ...]:
    """Every setting: those declared here, then the metrics' threshold flags."""
    global _ALL
    if _ALL is None:
        _ALL = SETTINGS + _threshold_settings()
    return _ALL


def setting(name: str) -> Setting:
    return next(s for s in settings() if s.name == name)


def relative_paths(table: dict, base: Path) -> dict:
    """``table`` with its path settings made absolute against ``base`` (a settings file's or manifest's folder)."""
    out = dict(table)
    for s in settings():
        if s.path and isinstance(out.get(s.name), str):
            out[s.name] = str((base / out[s.name]).resolve())
    return out


def _thresholds(layers: list[dict]) -> tuple[dict, dict]:
    """(global, per target): later layers win; a global bound set later overrides the same bound in
    earlier per-target tables. Every name is checked against the metrics' thresholds."""
    from portability.metrics.thresholds import DEFAULTS as KNOWN

    flags = {s.name: s.threshold for s in settings() if s.threshold}
    glob: dict = {}
    per: dict = {}
    for layer in layers:
        table = dict(layer.get("thresholds") or {})
        table.update({flags[k]: layer[k] for k in flags if layer.get(k) is not None})
        for k, v in table.items():
            if isinstance(v, dict):
                per.setdefault(k, {}).update(v)
                continue
            glob[k] = v
            for d in per.values():
                d.pop(k, None)
    for name in list(glob) + [k for d in per.values() for k in d]:
        if name not in KNOWN:
            raise UsageError(f"unknown threshold '{name}' (known: {', '.join(KNOWN)}; or a table per target id)")
    return glob, per


def resolve(*layers: dict[str, Any]) -> CheckOptions:
    """CheckOptions from settings layers, lowest first (a settings file, then flags or keyword arguments):
    in each layer a value of None is "not given". Unknown names are a UsageError naming the known ones."""
    known = {s.name for s in settings()}
    for layer in layers:
        bad = sorted(k for k, v in layer.items() if k not in known and v is not None)
        if bad:
            raise UsageError(f"unknown option '{bad[0]}' (known: {', '.join(sorted(known))})")
    fields: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for s in settings():
        if s.threshold or s.name == "thresholds":
            continue
        value = next((layer[s.name] for layer in reversed(layers) if layer.get(s.name) is not None), s.default)
        into = s.into or s.name
        if into.startswith("limits."):
            limits[into.removeprefix("limits.")] = s.read(value)
        else:
            fields[into] = s.read(value)
    glob, per = _thresholds(list(layers))
    return CheckOptions(**fields, limits=Limits(**limits), thresholds=glob, target_thresholds=per,
                        timeout_explicit=any(layer.get("timeout") is not None for layer in layers))


__all__ = ["CheckOptions", "Limits", "Setting", "SETTINGS", "settings", "setting", "resolve", "relative_paths",
           "MEMORY_SHARE"]
