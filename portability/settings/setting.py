"""One user setting: its name (the settings-file key, the keyword argument and, dashed, the flag), its
type, default and help text, the commands that take it, and how its value is read. ``settings/options.py``
declares them all and resolves them into ``CheckOptions``.

Light module: no numpy, no heavy import.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


#: the help sections settings are listed under (``check --help``)
WHAT, INPUTS, RUNNING, THRESHOLDS = "What to check", "Inputs", "Running", "Thresholds"

#: how a settings file may give a value of each flag type
_FILE_TYPES: dict[Any, tuple] = {str: (str,), int: (int,), float: (int, float), Path: (str,), list: (list,),
                                 bool: (bool,), dict: (dict,)}


@dataclass(frozen=True)
class Setting:
    """One user setting (see the module's docstring)."""

    name: str
    #: the flag's value type: str, int, float, bool, Path, list (a repeatable string flag), dict (no flag)
    type: Any
    #: None: not set (or computed where it is read)
    default: Any
    help: str
    group: str
    #: the CheckOptions field it sets (``limits.run_timeout_s``: a field of its Limits); default: its name
    into: str | None = None
    #: value -> the field's value (a UsageError for a bad one); default: as given
    parse: Callable[[Any, "Setting"], Any] | None = None
    #: the flag's declarations when not ``--name`` (``--robustness/--no-robustness``); "" for no flag
    flag: str | None = None
    short: str | None = None
    min: float | None = None
    #: the commands that take it as a flag
    commands: tuple[str, ...] = ("check",)
    #: the types a settings file or manifest may give (default: from ``type``); () where it cannot be set there
    file: tuple | None = None
    #: a file path, relative to the settings file or manifest that gives it
    path: bool = False
    #: a flag that turns the setting off (``--no-cache`` sets ``use_cache`` False)
    negate: bool = False
    #: the threshold (``metrics``) this flag sets
    threshold: str | None = None
    #: how the default reads in the help text, where it is not the default itself
    shown: str | None = None

    @property
    def decls(self) -> tuple[str, ...]:
        if self.flag == "":
            return ()
        first = self.flag or "--" + self.name.replace("_", "-")
        return (first, self.short) if self.short else (first,)

    @property
    def option(self) -> str:
        """The flag as messages name it (``--input-range``), or the setting's name where it has no flag."""
        return self.decls[0].split("/")[0] if self.decls else self.name

    @property
    def file_types(self) -> tuple:
        return self.file if self.file is not None else _FILE_TYPES.get(self.type, ())

    def help_text(self) -> str:
        if self.shown is not None:
            shown = self.shown
        elif isinstance(self.default, float):
            shown = f"{self.default:g}"
        elif isinstance(self.default, tuple):
            shown = ",".join(f"{x:g}" for x in self.default)
        else:
            shown = str(self.default)
        return self.help.format(default=shown)

    def read(self, value: Any) -> Any:
        return self.parse(value, self) if self.parse else value
