"""Command-line options shared by commands, declared once (``Annotated`` aliases, as huggingface_hub's CLI
does). Defaults live in ``portability.engine.options``; a flag left out is None, "not given", so that a
settings file can set it."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from portability.engine.options import DEFAULTS as D

TargetsOpt = Annotated[Optional[str], typer.Option(
    "--targets", "-t", help="Comma-separated platforms (server, web, mobile, all) or exact target ids (web/ort-wasm). "
    f"Default: {D['targets']}. The reference server/ort-cpu always runs.")]
JsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write the schema-v1 JSON report here.")]
JunitOpt = Annotated[Optional[Path], typer.Option("--junit", help="Write a JUnit XML report here (one test case per target), for CI.")]
HtmlOpt = Annotated[Optional[Path], typer.Option("--html", help="Write a self-contained HTML report with plots here (opens offline).")]
MarkdownOpt = Annotated[Optional[Path], typer.Option("--markdown", help="Write a Markdown summary here (for a CI job summary or a PR comment).")]
DatasetOpt = Annotated[Optional[Path], typer.Option("--dataset", help=".npz with 'x' (or one array per input) and integer labels 'y': adds task accuracy.")]
InputsOpt = Annotated[Optional[Path], typer.Option("--inputs", help=".npz with one array per model input (one batch, or a stack of batches).")]
ShapeOpt = Annotated[Optional[List[str]], typer.Option("--shape", help="Fix dynamic dims: NAME=1x3x224x224 (repeatable). Default: leading dim 1, others 32, with a warning. The converters get them too.")]
SamplesOpt = Annotated[Optional[int], typer.Option("--samples", min=1, help="Synthesized batches (default 8), or the most dataset samples to use (default all).")]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", help=f"Seed of synthesized inputs (default {D['seed']}).")]
InputRangeOpt = Annotated[Optional[str], typer.Option("--input-range", help="LOW,HIGH of synthesized float inputs (default 0,1).")]
WarmupOpt = Annotated[Optional[int], typer.Option("--warmup", min=0, help=f"Untimed runs before timing (default {D['warmup']}).")]
RunsOpt = Annotated[Optional[int], typer.Option("--runs", min=0, help=f"Timed runs for latency percentiles (default {D['runs']}; 0 skips timing).")]
TimeBudgetOpt = Annotated[Optional[float], typer.Option("--time-budget", min=0, help=f"Seconds a target's latency sampling may take (default {D['time_budget']:g}): a slow target gets fewer runs (at least 5), and the report says how many.")]
TimeoutOpt = Annotated[Optional[float], typer.Option("--timeout", min=1, help=f"Seconds a target may take from loading to its last timed run (default {D['timeout']:g}).")]
ConvertTimeoutOpt = Annotated[Optional[float], typer.Option("--convert-timeout", min=1, help=f"Seconds a target's conversions may take (default {D['convert_timeout']:g}).")]
MemoryOpt = Annotated[Optional[float], typer.Option("--memory-limit-mb", help="Kill a target whose processes use more memory (default: 80% of RAM).")]
MaxAbsOpt = Annotated[Optional[float], typer.Option("--max-abs", help="Threshold: largest absolute output difference (default 1e-4).")]
CosineOpt = Annotated[Optional[float], typer.Option("--cosine", help="Threshold: lowest cosine similarity per output (default 0.9999).")]
MinTop1Opt = Annotated[Optional[float], typer.Option("--min-top1", help="Threshold: lowest top-1 agreement (default 1.0).")]
MaxAccuracyDropOpt = Annotated[Optional[float], typer.Option("--max-accuracy-drop", help="Threshold: largest accuracy fall with --dataset (default 0.01).")]
GateOpt = Annotated[Optional[List[str]], typer.Option("--gate", help="Make targets/platforms gating (ID) or cross-checks (-ID); comma-separated, repeatable.")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Convert afresh and keep nothing in the artifact cache.")]
CacheDirOpt = Annotated[Optional[Path], typer.Option("--cache-dir", help="Artifact cache (default $PORTABILITY_CACHE_DIR or ~/.cache/portability).")]
JobsOpt = Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, help="Targets converted, loaded and run at once after the reference (default: the number of cores). Latency is always sampled with nothing else running.")]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="Settings file (default: ./portability.toml or [tool.portability] in ./pyproject.toml).")]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help="Apply the settings of [tool.portability.profiles.NAME] over the base settings.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Only the table (and errors).")]
ViaOpt = Annotated[Optional[str], typer.Option("--via", help="Route every target's conversion through this format (onnx, saved_model...) or converter (OnnxFromTorchScript): compare with the native routes of a run without it.")]
RobustnessOpt = Annotated[Optional[bool], typer.Option("--robustness/--no-robustness", help="Also run seeded perturbed inputs (noise, brightness/contrast, id substitutions) and, for a .pt2/.keras source, FGSM/PGD examples on every target: accuracy and flip rate against the reference per level.", show_default=False)]
RobustnessSamplesOpt = Annotated[Optional[int], typer.Option("--robustness-samples", min=1, help=f"How many of the first input rows the robustness pass perturbs (default {D['robustness_samples']}).")]
SandboxOpt = Annotated[Optional[str], typer.Option("--sandbox", help=f"The OS sandbox of every process that reads or runs the model (no network, the model's folder read-only, writes only to its own work folder): auto (where the kernel can; says once where it cannot), require (an error where it cannot), off. Default: $PORTABILITY_SANDBOX, else {D['sandbox']}.")]
VersionsOpt = Annotated[Optional[List[str]], typer.Option("--versions", help="PACKAGE=V1,V2 (repeatable): run the targets that use PACKAGE once more per version, each in an environment of its own built once in the cache, as TARGET@VERSION cross-checks, with a versions x targets table. Packages: onnxruntime, onnxruntime-web, tensorflow, ai-edge-litert, onnx2tf, tensorflowjs, @tensorflow/tfjs.")]
