"""Reports to compare with: a run id of the history, or a JSON report file."""
from __future__ import annotations

import json
from pathlib import Path

from portability.core.errors import UsageError
from portability.report.diff import signature
from portability.report.golden import is_outputs_file
from portability.report.schema import Report


def load(spec: str, history_path: Path | None = None) -> tuple[Report, str]:
    """(report, label) for ``spec``: an integer is a history run id, anything else a JSON report file.
    Every way this can fail is a UsageError of one line."""
    from portability.report.history import History, HistoryError

    spec = str(spec).strip()
    if spec.isdigit() and not Path(spec).is_file():
        try:
            with History(history_path) as h:
                return h.report(int(spec)), f"run {spec}"
        except HistoryError as e:
            raise UsageError(str(e)) from None
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"baseline '{spec}' is neither a run id of the history nor a report file")
    if is_outputs_file(path):
        _, report = _outputs_file(path)
        if report is None:
            raise UsageError(f"{path} holds outputs but no report: save it with check --save-outputs")
        return Report.from_dict(report), str(path)
    try:
        return Report.from_dict(json.loads(path.read_text())), str(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path} is not a portability JSON report: {type(e).__name__}: {e}") from None


def _outputs_file(path: Path):
    from portability.report.golden import Golden

    try:
        return Golden.load(path)
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: {e}") from None


def outputs(spec: str, history_path: Path | None = None):
    """The kept outputs (``golden.Golden``) of a run id or of a ``--save-outputs`` file, else the digests
    its report carries (a JSON report, a run recorded without its outputs); None when it holds neither."""
    from portability.report.golden import Golden
    from portability.report.history import History, HistoryError

    spec = str(spec).strip()
    if spec.isdigit() and not Path(spec).is_file():
        try:
            with History(history_path) as h:
                data = h.outputs(int(spec))
        except HistoryError as e:
            raise UsageError(str(e)) from None
        return Golden.from_bytes(data)[0] if data else digests(*load(spec, history_path))
    path = Path(spec)
    return _outputs_file(path)[0] if is_outputs_file(path) else digests(*load(spec, history_path))


def digests(report: Report, label: str = "the baseline"):
    """The output digests a report carries (``golden.Golden``, its outputs sampled); None for a report
    written without them."""
    from portability.report.golden import Golden

    if not report.output_digests:
        return None
    try:
        return Golden.from_digests(report.output_digests)
    except ValueError as e:
        raise UsageError(f"{label}: {e}") from None


def require_comparable(baseline: Report, model: dict, label: str) -> None:
    """A baseline may be of another version of the model (that is what a regression gate compares), but
    its inputs and outputs must be the same: otherwise nothing lines up."""
    if signature(baseline.model) != signature(model):
        names = lambda m: ", ".join(x["name"] for x in m.get("inputs", []) + m.get("outputs", []))  # noqa: E731
        raise UsageError(f"baseline {label} is of a model with other inputs/outputs ({names(baseline.model)}) "
                         f"than {Path(model.get('path', '')).name} ({names(model)})")
