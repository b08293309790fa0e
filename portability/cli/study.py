"""``portability study``: the founding experiment, reproducible with one command."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from portability.cli.options import QuietOpt, takes_settings

from portability.core.status import Status


def _split(v: Optional[str]) -> list[str] | None:
    return [p.strip() for p in v.split(",") if p.strip()] if v else None


class _Progress:
    """Stage lines, training epochs, and each deployed target as it finishes."""
    def __init__(self, console, quiet: bool, json_path: Optional[Path] = None):
        from portability.cli.check import _Progress as CheckProgress

        self.console, self.quiet, self.json_path = console, quiet, json_path
        self.check = CheckProgress(console, quiet)
        self.status = None

    def stage(self, text: str) -> None:
        if not self.quiet:
            self.console.print(f"[bold]{text}[/]", highlight=False, soft_wrap=True)

    def training(self, e: dict) -> None:
        if self.quiet or e.get("event") != "epoch":
            return
        loss = f"loss {e['loss']:.4f}" if isinstance(e.get("loss"), (int, float)) else ""
        acc = f"eval accuracy {100 * e['eval_accuracy']:.2f} %" if isinstance(e.get("eval_accuracy"), (int, float)) else ""
        self.console.print(f"  epoch {e.get('epoch')}/{e.get('epochs')}  {loss}  {acc}  {e.get('seconds', 0):.1f} s", highlight=False)

    def check_progress(self):
        return self.check

    def so_far(self, result) -> None:
        """The study's JSON as it stands, marked ``partial``: a study stopped midway leaves its rows readable
        (and resumes from its state when run again)."""
        if self.json_path:
            _write_json(self.json_path, dict(result.to_dict(), partial=True))

    def row_done(self, row: dict) -> None:
        if self.quiet:
            return
        tr = row.get("training") or {}
        if tr.get("status") != "ok":
            self.console.print(f"  [yellow]training {tr.get('status')}[/]: {tr.get('error', '')}", highlight=False, soft_wrap=True)
            return
        if tr.get("cached"):
            self.console.print(f"  trained model from the cache ({tr.get('dir')})", highlight=False)
        if row.get("resumed"):
            self.console.print("  checked by an earlier run of the same study with the same settings: its results kept", highlight=False, soft_wrap=True)
        exp = row.get("export") or {}
        if exp.get("status") != "ok":
            self.console.print(f"  [red]export failed[/]: {exp.get('error', '')}", highlight=False, soft_wrap=True)
        passed = sum(1 for t in row["targets"] if t["status"] == Status.PASS)
        self.console.print(f"  {passed}/{len(row['targets'])} targets pass", highlight=False)


@takes_settings("study")
def study(
    quick: bool = typer.Option(False, "--quick", help="The quick profile: a small training budget (minutes on 2 cores) and each platform's main targets."),
    frameworks: Optional[str] = typer.Option(None, "--frameworks", "-f", help="Source frameworks, comma-separated (default: torch,keras,mxnet)."),
    models: Optional[str] = typer.Option(None, "--models", "-m", help="Architectures: lenet1, lenet5, resnet20, lstm (default: all)."),
    datasets: Optional[str] = typer.Option(None, "--datasets", "-d", help="Datasets: mnist, fashion, rotten (default: each model's own: LeNets on mnist, resnet20 on fashion, lstm on rotten). Image models take mnist/fashion, lstm takes rotten."),
    targets: Optional[str] = typer.Option(None, "--targets", "-t", help="Where to deploy: platforms and/or target ids, as for check (default: every target; with --quick each platform's main runtimes)."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Training profile by name (quick, full, or step: one optimizer step, for tests); --quick is --profile quick.", hidden=False),
    json_path: Optional[Path] = typer.Option(Path("study.json"), "--json", help="Write the study's JSON here (every check report plus the study's tables' rows)."),
    markdown_path: Optional[Path] = typer.Option(None, "--markdown", help="Also write the study's tables as Markdown."),
    robustness: Optional[bool] = typer.Option(None, "--robustness/--no-robustness", help="Measure robustness on every target too (check --robustness: random perturbations, FGSM and PGD). Default: on in the full profile, off otherwise."),
    retrain: bool = typer.Option(False, "--retrain", help="Train and check again even when the model and its results are in the cache (a stopped study otherwise resumes where it stopped)."),
    tables_of: Optional[Path] = typer.Option(None, "--tables", help="Run nothing: print the tables of a study's JSON (and write --markdown)."),
    seed: int = typer.Option(0, "--seed", help="Training seed (weights, sample order) and the checks' seed."),
    seeds: Optional[int] = typer.Option(None, "--seeds", min=1, help="Train each framework, model and dataset this many times (seeds --seed, --seed+1, …): the tables give mean ± standard deviation, and a framework difference is called significant only beyond the seed spread (Welch's t-test). Default: 3 in the full profile, 1 otherwise."),
    localize: Optional[bool] = typer.Option(None, "--localize/--no-localize", help="Localize every drifting target (portability localize on the row's samples): its first diverging op, in the row's JSON and the failure table; a target that drifts with several seeds is localized on the first. Default: on in the full profile."),
    same_weights: Optional[bool] = typer.Option(None, "--same-weights/--no-same-weights", help="Also load each PyTorch model's trained weights into the Keras and MXNet definitions of the same architecture (layouts converted, no training), compare their outputs with PyTorch's before any export, and deploy them too: the frameworks' computation and export paths with the training taken out. Default: on in the full profile."),
    zoo: str = typer.Option("founding", "--zoo", help="Which models: founding (the founding study's LeNets, ResNet-20 and LSTM, trained in each framework), transformers (tiny BERT, ViT, GPT-2 with and without its cache, wav2vec2, Whisper's encoder and T5, built from their Hugging Face configurations with random weights, each as ONNX and as a .pt2; --models picks some; needs `portability setup transformers`) or generation (tiny GPT-2, Llama and Qwen2 decoders built the same way, exported in Optimum's layout with their cache, each checked with check --generate: tokens matched and tokens/s per target; docs/generation.md)."),
    steps: Optional[int] = typer.Option(None, "--generate", min=1, help="The generation zoo: tokens each model decodes greedily on every target (default 16)."),
    quiet: QuietOpt = False,
    cache_dir: Optional[Path] = None,
    jobs: Optional[int] = None,
) -> int:
    """Train the same models in PyTorch, Keras and MXNet, deploy each to server, web and mobile targets
    through check, and compare accuracy, drift, size, latency and failures across frameworks and platforms.

    Trained models are cached (a second run trains nothing). Prints the study's tables; exit 0 when the
    study ran (failed exports and targets are findings, listed in the tables), 2 on a usage error."""
    from rich.console import Console

    from portability.cli import outputs
    from portability.core.errors import UsageError
    from portability.study import render
    from portability.report.files import write_atomic
    from portability.study.run import StudyOptions, run_study, validate

    if tables_of is not None:
        return _tables_only(tables_of, markdown_path)
    if zoo != "founding":
        return _transformers(zoo, (frameworks, datasets, seeds, same_weights), _split(models), targets, quick, profile,
                             bool(localize), seed, cache_dir, json_path, markdown_path, quiet, steps)
    if steps is not None:
        raise UsageError("--generate is the generation zoo's (--zoo generation)")
    if quick and profile and profile != "quick":
        raise UsageError("give --quick or --profile, not both")
    o = StudyOptions(frameworks=_split(frameworks), archs=_split(models), datasets=_split(datasets), targets=targets,
                     profile=profile or ("quick" if quick else "full"), seed=seed, seeds=seeds,
                     cache_dir=Path(cache_dir) if cache_dir else None, retrain=retrain, jobs=jobs, robustness=robustness, localize=localize,
                     same_weights=same_weights)
    validate(o)
    outputs.require_writable(json_path, None, None, markdown_path)
    err = Console(stderr=True)
    result = run_study(o, _Progress(err, quiet, json_path)).to_dict()
    if json_path:  # the files first: whatever happens on the terminal, the study is kept
        _write_json(json_path, result)
        err.print(f"study: {json_path}")
    if markdown_path:
        write_atomic(markdown_path, render.to_markdown(result))
        err.print(f"tables: {markdown_path}")
    out = Console()
    if not out.is_terminal:
        out = Console(width=160)
    render.render(result, out)
    s = result["seconds"]
    err.print(f"study done in {s['total']:.0f} s (training {s['train']:.0f} s, deployment and evaluation {s['check']:.0f} s)")
    return 0


def _write_json(path: Path, study: dict) -> None:
    import json

    from portability.report.files import _clean, write_atomic

    write_atomic(path, json.dumps(_clean(study), indent=1, allow_nan=False, default=str))


def _tables_only(path: Path, markdown_path: Optional[Path]) -> int:
    import json

    from rich.console import Console

    from portability.core.errors import UsageError
    from portability.report.files import write_atomic
    from portability.study import render

    try:
        study = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"--tables: cannot read {path}: {e}") from None
    if not isinstance(study, dict) or study.get("kind") != "portability-study":
        raise UsageError(f"--tables: {path} is not a study's JSON (portability study --json)")
    from portability.study.run import derive

    study = derive(study)  # its sections as this version computes them from the rows
    out = Console()
    if not out.is_terminal:
        out = Console(width=160)
    render.render(study, out)
    if markdown_path:
        write_atomic(markdown_path, render.to_markdown(study))
    return 0


def _transformers(zoo, founding_only, models, targets, quick, profile, localize, seed, cache_dir, json_path,
                  markdown_path, quiet, steps=None) -> int:
    """``study --zoo transformers``: every model file of the transformer zoo checked (and localized)."""
    from rich.console import Console

    from portability.cli import outputs
    from portability.core.errors import UsageError

    if zoo not in ("transformers", "generation"):
        raise UsageError(f"unknown zoo {zoo!r} (founding, transformers or generation)")
    if any(founding_only):
        raise UsageError("--frameworks, --datasets, --seeds and --same-weights are the founding zoo's: "
                         f"the {zoo} zoo builds each model once, from its configuration")
    if zoo == "generation":
        if localize:
            raise UsageError("--localize is not the generation zoo's: check a drifting target with `portability localize`")
        return _generation(models, targets, quick, profile, seed, cache_dir, json_path, markdown_path, quiet, steps)
    if steps is not None:
        raise UsageError("--generate is the generation zoo's (--zoo generation)")
    from portability.core.sandbox import default_mode
    from portability.engine.session import Session
    from portability.study import transformers as tz
    from portability.study.run import DEFAULT_TARGETS

    chosen = tz.names(models)
    spec = targets or DEFAULT_TARGETS["quick" if quick else profile or "full"]
    outputs.require_writable(json_path, None, None, markdown_path)
    err = Console(stderr=True)
    with Session(default_mode(), ()) as session:
        result = tz.run_zoo(chosen, spec, session, Path(cache_dir) if cache_dir else None, localize, seed, _Progress(err, quiet, None))
    return _written(result, tz.table(result["rows"]), json_path, markdown_path, err, "model files")


def _generation(models, targets, quick, profile, seed, cache_dir, json_path, markdown_path, quiet, steps) -> int:
    """``study --zoo generation``: each decoder of the generation zoo checked with ``--generate``."""
    from rich.console import Console

    from portability.cli import outputs
    from portability.core.sandbox import default_mode
    from portability.engine.session import Session
    from portability.study import generation as gz

    chosen = gz.names(models)
    spec = targets or gz.DEFAULT_TARGETS["quick" if quick or profile == "quick" else "full"]
    outputs.require_writable(json_path, None, None, markdown_path)
    err = Console(stderr=True)
    with Session(default_mode(), ()) as session:
        result = gz.run_zoo(chosen, spec, session, Path(cache_dir) if cache_dir else None, seed, steps or gz.DEFAULT_STEPS,
                            _Progress(err, quiet, None))
    return _written(result, gz.table(result), json_path, markdown_path, err, "models")


def _written(result: dict, md: str, json_path, markdown_path, err, what: str) -> int:
    """A zoo study's JSON and Markdown written where asked, its table printed."""
    from portability.report.files import write_atomic

    if json_path:
        _write_json(json_path, result)
        err.print(f"study: {json_path}")
    if markdown_path:
        write_atomic(markdown_path, md + "\n")
        err.print(f"tables: {markdown_path}")
    print(md)
    err.print(f"study done in {result['seconds']['total']:.0f} s ({len(result['rows'])} {what})")
    return 0
