"""Settings from ``portability.toml`` or ``[tool.portability]`` in ``pyproject.toml`` (CLI flags win).

    [tool.portability]
    targets = "server,web"
    gate = ["server/onnx-reference"]       # make a cross-check gating; "-web/ort-webgl" makes one non-gating
    warmup = 10
    runs = 50
    shapes = ["x=1x1x28x28"]               # input specs, as --shape; dataset / inputs as --dataset / --inputs
    dataset = "data/digits.npz"            # paths are relative to this file
    baseline = "reports/main.json"         # a JSON report or a history run id (check --baseline)
    [tool.portability.thresholds]
    max_abs = 1e-4
    cosine = 0.9999
    [tool.portability.thresholds."mobile/tflite-fp16"]
    max_abs = 5e-3
    [tool.portability.regression]          # what --baseline calls a regression (each metric's TOLERANCES)
    size_growth = 0.05
    [tool.portability.profiles.ci]         # --profile ci: these settings over the ones above
    targets = "server,web"
    runs = 20
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from portability.core.errors import UsageError
from portability.settings.options import relative_paths, settings
from portability.metrics.thresholds import DEFAULTS

#: comparing with a baseline (report/diff.py): keys of the ``check`` command, not of a check; named profiles
#: ([tool.portability.profiles.NAME]) hold these keys too
COMPARE = {"baseline": (str, int), "regression": dict}


def keys() -> dict:
    """{key: the types it may have} of a settings file: every check setting a file can set (``settings.options``),
    and the comparison's."""
    return {s.name: s.file_types for s in settings() if s.file_types} | COMPARE


def find_config(start: Path) -> Path | None:
    for name in ("portability.toml", "pyproject.toml"):
        p = start / name
        if p.is_file() and (name == "portability.toml" or "[tool.portability" in p.read_text(errors="replace")):
            return p
    return None


def load_config(path: Path | None, profile: str | None = None) -> dict:
    """The validated settings table (empty when there is no file), with the named profile's settings
    (``[tool.portability.profiles.NAME]``) applied over the base ones."""
    if path is None:
        if profile:
            raise UsageError(f"--profile {profile}: no portability.toml or [tool.portability] in pyproject.toml here")
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read config {path}: {e}") from None
    table = data.get("tool", {}).get("portability", {}) if path.name == "pyproject.toml" else data.get("tool", {}).get("portability", data)
    KEYS = keys()
    profiles = table.pop("profiles", {})
    for name, prof in (profiles.items() if isinstance(profiles, dict) else [("?", None)]):
        bad = [k for k in prof if k not in KEYS] if isinstance(prof, dict) else ["(not a table)"]
        if bad:
            raise UsageError(f"{path}: profile '{name}': unknown setting '{bad[0]}' (known: {', '.join(sorted(KEYS))})")
    if profile:
        if not isinstance(profiles, dict) or not isinstance(profiles.get(profile), dict):
            known = ", ".join(sorted(profiles)) if isinstance(profiles, dict) and profiles else "none"
            raise UsageError(f"{path}: no profile '{profile}' (profiles: {known})")
        over = dict(profiles[profile])
        if isinstance(over.get("thresholds"), dict) and isinstance(table.get("thresholds"), dict):
            over["thresholds"] = {**table["thresholds"], **over["thresholds"]}
        table = {**table, **over}
    for key, value in table.items():
        if key not in KEYS:
            raise UsageError(f"{path}: unknown setting '{key}' (known: {', '.join(sorted(KEYS))})")
        if not isinstance(value, KEYS[key]) or (isinstance(value, bool) and bool not in KEYS[key]):
            raise UsageError(f"{path}: setting '{key}' has the wrong type ({type(value).__name__})")
    for key, value in table.get("thresholds", {}).items():
        if isinstance(value, dict):
            bad = [k for k in value if k not in DEFAULTS]
        else:
            bad = [] if key in DEFAULTS and isinstance(value, (int, float)) else [key]
        if bad:
            raise UsageError(f"{path}: unknown threshold '{bad[0]}' (known: {', '.join(DEFAULTS)}; or a target id table)")
    table = relative_paths(table, path.parent)
    baseline = table.get("baseline")
    if isinstance(baseline, str) and not baseline.isdigit():  # a baseline may be a history run id
        table["baseline"] = str((path.parent / baseline).resolve())
    return table
