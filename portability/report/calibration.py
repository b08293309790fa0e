"""What calibrated each variant that calibrates (static int8: ``server/ort-qdq``, ``web/ort-wasm-qdq``,
``mobile/tflite-int8``…), as the report states it: a target's ``details.calibration``, its note, and the check's
notes — a warning where the samples were synthesized (random calibration is itself a cause of collapse).

Made from the converter's own account in its artifact's meta (``meta["calibration"]``: its words;
``meta["calibration_source"]``; optionally ``meta["calibration_samples"]`` and ``meta["calibration_method"]``,
else read from its words) and from the check's facts about the samples it handed over
(``engine.prepare.Calibration.facts``). ``details.calibration``::

    {"source": "dataset" | "file" | "inputs" | "synthesized",  # --dataset, --calibration, --inputs, made up
     "samples": 64,           # the samples the converter calibrated on (None where it did not say)
     "method": "MinMax",      # its calibration method (None where it did not say)
     "held_out": true,        # none of them is an evaluated sample
     "given": 64,             # the samples the check handed over (a converter may use fewer)
     "path": "digits.npz",    # their file (None for synthesized ones)
     "text": "dataset (64 samples)"}  # the converter's own words; "why" where a dataset's evaluated samples
                                      # calibrate, "shared" where --calibration samples are evaluated too

Light module: no numpy.
"""
from __future__ import annotations

import os
import re

#: how every warning about synthesized calibration starts (the terminal prints those notes as warnings)
WARNING = "calibrated on synthesized inputs"

_METHODS = {"minmax": "MinMax", "min/max": "MinMax", "entropy": "Entropy", "percentile": "Percentile",
            "distribution": "Distribution"}


def is_warning(note: str) -> bool:
    return note.startswith(WARNING)


def describe(meta: dict | None, facts: dict | None, calibrates: bool) -> dict | None:
    """A calibrating target's ``details.calibration`` (module docstring); None for a target that does not
    calibrate (its artifact's meta says nothing of calibration and no step of its route calibrates)."""
    meta, facts = meta or {}, facts or {}
    if not facts or not (calibrates or "calibration" in meta or "calibration_source" in meta):
        return None
    text = meta.get("calibration")
    source = facts.get("source")
    if meta.get("calibration_source") == "synthesized" and source != "synthesized":
        source = "synthesized"  # the converter made up its own samples: its word goes
    samples = meta.get("calibration_samples")
    if samples is None and isinstance(text, str) and (m := re.search(r"(\d+) samples", text)):
        samples = int(m.group(1))
    out = {"source": source, "samples": samples, "method": meta.get("calibration_method") or _method(meta),
           "held_out": bool(facts.get("held_out")) if source == facts.get("source") else True,
           "given": facts.get("given"), "path": facts.get("path") if source == facts.get("source") else None,
           "text": text if isinstance(text, str) else None}
    out.update({k: facts[k] for k in ("why", "shared") if facts.get(k) and source == facts.get("source")})
    return out


def _method(meta: dict) -> str | None:
    """The calibration method a converter's words name (its calibration text, then its quantization's)."""
    for said in (meta.get("calibration"), meta.get("quantization"), meta.get("produced_by")):
        if isinstance(said, str):
            for word, name in _METHODS.items():
                if re.search(rf"(?<![\w/]){re.escape(word)}(?![\w/])", said, re.IGNORECASE):
                    return name
    return None


def note(c: dict) -> str:
    """A calibrating target's note: what calibrated it; a warning where the samples were synthesized."""
    n = c.get("samples")
    count, how = (f"{n} " if n else ""), (f" ({c['method']})" if c.get("method") else "")
    name = os.path.basename(c.get("path") or "") or "the file"
    if c["source"] == "synthesized":
        return (f"{WARNING} ({count}random samples{', ' + c['method'] if c.get('method') else ''}), not real data: a "
                "static int8 variant calibrated on noise can collapse on real inputs; give real samples with "
                "--dataset or --calibration FILE")
    if c["source"] == "dataset" and c.get("held_out"):
        return f"calibrated{how} on {count}samples of --dataset {name} held out from evaluation"
    if c["source"] == "dataset":
        return (f"calibrated{how} on {n or 'some'} of the evaluated --dataset samples ({c.get('why')}), so the "
                "accuracy here may flatter it; --calibration FILE calibrates on samples of their own")
    if c["source"] == "inputs":
        return (f"calibrated{how} on {n or 'some'} of the compared --inputs samples: the drift here may flatter it "
                "(--calibration FILE calibrates on samples of their own)")
    shared = f"; {c['shared']} of them are also evaluated samples" if c.get("shared") else ""
    return f"calibrated{how} on {count}samples of --calibration {name}{shared}"


def check_notes(facts: dict | None, calibrated: dict[str, dict]) -> list[str]:
    """The check's notes: the warning naming every target calibrated on synthesized samples, and the
    ``--dataset`` share held out for calibration. ``calibrated``: target id -> its ``details.calibration``."""
    facts = facts or {}
    out = []
    made_up = [tid for tid, c in calibrated.items() if c.get("source") == "synthesized"]
    if made_up:
        out.append(f"{WARNING} (random samples, not real data): {', '.join(made_up)}; random calibration is itself a "
                   "cause of collapse on real inputs, which a check on synthesized inputs does not show: give real "
                   "samples with --dataset or --calibration FILE")
    if facts.get("source") == "dataset" and facts.get("held_out"):
        out.append(f"--dataset: its last {facts['given']} of {facts['of']} samples are held out to calibrate the "
                   f"variants that calibrate (static int8) and are not evaluated: every target is judged on the first "
                   f"{facts['evaluated']} (--calibration FILE gives calibration samples of their own; "
                   "--calibrate-on-eval calibrates on the evaluated ones)")
    return out
