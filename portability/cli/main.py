"""``portability``: the command line. Only this package prints; everything else logs.

Exit codes: 0 every gating target passed · 1 a gating target failed · 2 usage error or bad model/input
· 3 internal error (traceback with PORTABILITY_DEBUG=1).
"""
from __future__ import annotations

import logging
import os
import sys
import traceback

import typer

from portability.cli import bundle as bundle_cmd
from portability.cli import check as check_cmd
from portability.cli import doctor as doctor_cmd
from portability.cli import fix as fix_cmd
from portability.cli import history as history_cmd
from portability.cli import localize as localize_cmd
from portability.cli import quantize as quantize_cmd
from portability.cli import serve as serve_cmd
from portability.cli import setup as setup_cmd
from portability.cli import audit as audit_cmd
from portability.cli import study as study_cmd
from portability.cli import targets as targets_cmd

app = typer.Typer(
    name="portability",
    help="Does a trained model still work, and how well, once it leaves its framework? "
    "Reads a model as its owner has it (ONNX, Keras, SavedModel, TFLite, TF.js, torch.export or MXNet), "
    "converts it to each platform's formats, really runs it there (server, web browser, mobile), "
    "and reports drift against its own framework's reference run, accuracy, size and latency.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("check")(check_cmd.check)
app.command("targets")(targets_cmd.targets)
app.command("doctor")(doctor_cmd.doctor)
app.command("history")(history_cmd.history)
app.command("diff")(history_cmd.diff)
app.command("study")(study_cmd.study)
app.command("audit")(audit_cmd.audit)
app.command("localize")(localize_cmd.localize)
app.command("fix")(fix_cmd.fix)
app.command("quantize-report")(quantize_cmd.quantize_report)
app.command("serve")(serve_cmd.serve)
app.command("bundle")(bundle_cmd.bundle)
app.command("ingest")(bundle_cmd.ingest)
app.add_typer(setup_cmd.app, name="setup")


def _cli_exceptions() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """(usage errors, exit requests, aborts) of the click that typer runs on, through typer's own names: its
    vendored copy (typer >= 0.20) or the click package it depends on (older typer). ``click`` itself is not
    imported: typer >= 0.20 no longer installs it."""
    usage = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    return (usage,), (typer.Exit,), (typer.Abort,)


def version() -> str:
    """The installed distribution's version, else (a checkout run without installing) the package's own."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("portability")
    except PackageNotFoundError:
        import portability

        return portability.__version__


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"portability {version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", help="Print the version and exit.", callback=_show_version,
                                      is_eager=True),
) -> None:
    """Does a trained model still work, and how well, once it leaves its framework?"""


def main() -> None:
    from portability.core.errors import UsageError

    usage_errors, exits, aborts = _cli_exceptions()

    logging.basicConfig(level=os.environ.get("PORTABILITY_LOG", "WARNING").upper(), format="%(relativeCreated)7.0f ms %(levelname)s %(name)s: %(message)s")
    try:
        rc = app(standalone_mode=False)
    except usage_errors as e:  # unknown option or command, missing argument: usage line + suggestion
        e.show()
        sys.exit(2)
    except exits as e:
        sys.exit(e.exit_code)
    except (*aborts, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:
        if os.environ.get("PORTABILITY_DEBUG") == "1":
            traceback.print_exc()
        else:
            print(f"internal error: {type(e).__name__}: {e} (run with PORTABILITY_DEBUG=1 for the traceback)", file=sys.stderr)
        sys.exit(3)
    sys.exit(rc if isinstance(rc, int) else 0)
