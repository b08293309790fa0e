"""Command-line options. A check's settings become flags from their one declaration
(``settings.options.SETTINGS`` and the metrics' thresholds): ``@takes_settings("check")`` gives a command a flag
for every setting that names that command, and hands the command the values as the settings' own names
(``--shape`` is ``shapes``, ``--no-cache`` is ``use_cache=False``), with None for a flag left out, so that a
settings file can set it. The options that are a command's own (where to write reports, what to compare
with) are declared once here as ``Annotated`` aliases, as huggingface_hub's CLI does."""
from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional, get_type_hints

import typer
from typer.models import ArgumentInfo

from portability.settings.options import Setting, settings

REPORTS = "Reports"

JsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write the schema-v1 JSON report here.", rich_help_panel=REPORTS)]
JunitOpt = Annotated[Optional[Path], typer.Option("--junit", help="Write a JUnit XML report here (one test case per target), for CI.", rich_help_panel=REPORTS)]
HtmlOpt = Annotated[Optional[Path], typer.Option("--html", help="Write a self-contained HTML report with plots here (opens offline).", rich_help_panel=REPORTS)]
MarkdownOpt = Annotated[Optional[Path], typer.Option("--markdown", help="Write a Markdown summary here (for a CI job summary or a PR comment).", rich_help_panel=REPORTS)]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="Settings file (default: ./portability.toml or \\[tool.portability] in ./pyproject.toml).")]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help="Apply the settings of \\[tool.portability.profiles.NAME] over the base settings.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Only the table (and errors).")]
AllowSkippedOpt = Annotated[bool, typer.Option(
    "--allow-skipped", help="Let the run pass when a target named by its exact id in --targets could not run here "
    "(skipped); without it such a target fails the run. Platform names (server, web, mobile, all) only ever ask for "
    "what can run here.")]


def annotation(s: Setting) -> Any:
    """The typer parameter of a setting's flag."""
    if s.negate:
        kind: Any = bool
    elif s.type is list:
        kind = Optional[List[str]]
    else:
        kind = Optional[s.type]
    # "[...]" would read as rich markup in --help
    return Annotated[kind, typer.Option(*s.decls, help=s.help_text().replace("[", "\\["), min=s.min, rich_help_panel=s.group,
                                        show_default=False)]


def flag_value(s: Setting, value: Any) -> Any:
    """A flag's value as the setting's: None where the flag was left out."""
    if s.negate:
        return False if value else None
    if s.type is list and not value:
        return None
    return value


def takes_settings(command: str) -> Callable:
    """A flag for every setting of ``command``, after the command's arguments and before its own options;
    the command gets them as keyword arguments named as the settings (collect them with ``**settings``, or
    name one as a parameter: its flag is still the setting's)."""
    chosen = [s for s in settings() if command in s.commands and s.decls]
    names = {s.name for s in chosen}

    def wrap(func: Callable) -> Callable:
        hints = get_type_hints(func, include_extras=True)
        own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(func).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD and p.name not in names]
        args = [p for p in own if isinstance(p.default, ArgumentInfo)]
        rest = [p for p in own if p not in args]
        flags = [inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation(s),
                                   default=False if s.negate else None) for s in chosen]
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in args] + flags + \
                 [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in rest]

        @functools.wraps(func)
        def command_with_settings(**given: Any) -> Any:
            values = {s.name: flag_value(s, given.pop(s.name)) for s in chosen if s.name in given}
            return func(**given, **values)

        command_with_settings.__signature__ = inspect.Signature(params, return_annotation=hints.get("return", inspect.Signature.empty))
        command_with_settings.__annotations__ = {p.name: p.annotation for p in params}
        return command_with_settings

    return wrap


__all__ = ["takes_settings", "annotation", "flag_value", "JsonOpt", "JunitOpt", "HtmlOpt", "MarkdownOpt", "ConfigOpt",
           "ProfileOpt", "QuietOpt", "AllowSkippedOpt"]
