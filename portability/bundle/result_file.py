"""A bundle's ``result.json`` read as the untrusted input it is: bounded, parsed strictly, type-checked.

The file comes back from a device nobody here controls, so before any field is used: its size is checked
before it is read (``MAX_BYTES``), its nesting depth before it is parsed (``MAX_DEPTH``), every number is a
finite number with a literal of sane length (no ``NaN``, ``Infinity``, ``1e400`` or 5,000-digit integer),
and every field has the type the result format gives it (a bool is not a number), strings and lists have
caps, the device's keys come from an allow-list and a target's engine ``info`` is small and plain. What
comes out is a new dict of the known fields only; unknown top-level and target fields are dropped (they
are never stored), unknown device or output fields are refused (they would be).
"""
from __future__ import annotations

import json
import os
import re
from datetime import datetime
from itertools import accumulate
from pathlib import Path
from typing import Any, Callable

from portability.bundle.mobile import RESULT_KIND as MOBILE_RESULT_KIND
from portability.bundle.web import FORMAT_VERSION, RESULT_KIND
from portability.core.errors import UsageError

#: the largest result file read (a real one is a few hundred KiB)
MAX_BYTES = 16 * 1024 * 1024
#: the deepest nesting of arrays and objects parsed (a real result nests 7 deep)
MAX_DEPTH = 16
#: the longest integer literal (int64 range) and float literal
MAX_INT_DIGITS = 19
MAX_FLOAT_CHARS = 40
MAX_TARGETS = 64
MAX_OUTPUTS = 1024
#: latency samples per target (a bundle times 20 runs unless told)
MAX_SAMPLES = 10_000
#: a name (id, version, platform), a line of text (user agent, renderer), an error message
NAME, LINE, ERROR = 256, 1024, 64 * 1024
#: a target's engine ``info``: its JSON size, and nesting below it
MAX_INFO_BYTES, MAX_INFO_DEPTH = 16 * 1024, 4

_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_TARGET_ID = re.compile(r"[a-z0-9][a-z0-9._+-]*(?:/[a-z0-9][a-z0-9._+-]*)*\Z")
_BUNDLE_ID = re.compile(r"[0-9a-f]{8,64}\Z")


class Refused(UsageError):
    """A result file that cannot be ingested (one line: why)."""


class _Hostile(Exception):
    """Raised from json's hooks; the caller names the file."""


# --- reading and parsing -------------------------------------------------------------------------------

def _bytes(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_BYTES:
                raise Refused(f"{path}: {size:,} bytes, larger than a result file can be ({MAX_BYTES:,} bytes at most)")
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise Refused(f"{path}: cannot be read: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise Refused(f"{path}: larger than a result file can be ({MAX_BYTES:,} bytes at most)")
    return data


def _depth(data: bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings (of a complete or a truncated text)."""
    brackets = _STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise _Hostile(f"an integer of {len(s.lstrip('-')):,} digits (at most {MAX_INT_DIGITS})")
    return int(s)


def _float(s: str) -> float:
    if len(s) > MAX_FLOAT_CHARS:
        raise _Hostile(f"a number written with {len(s):,} characters (at most {MAX_FLOAT_CHARS})")
    v = float(s)
    if v in (float("inf"), float("-inf")):
        raise _Hostile(f"the number {s}, beyond a double's range")
    return v


def _constant(s: str) -> None:
    raise _Hostile(f"{s} (not a JSON number)")


def parse(path: Path) -> Any:
    """The file's JSON value; Refused when too large, not UTF-8, too deep, not JSON or holding hostile numbers."""
    data = _bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refused(f"{path}: not a JSON result file (not UTF-8 text: byte {e.start})") from None
    depth = _depth(data)
    if depth > MAX_DEPTH:
        raise Refused(f"{path}: nested {depth:,} deep, deeper than a result file can be ({MAX_DEPTH} at most)")
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except _Hostile as e:
        raise Refused(f"{path}: holds {e}: a forged or damaged result") from None
    except json.JSONDecodeError as e:
        raise Refused(f"{path}: not a complete JSON result file (truncated or not JSON: {e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise Refused(f"{path}: nested too deeply to be a result file") from None


# --- field checkers: each takes (value, what it is) and returns the value, or raises Refused -------------

Check = Callable[[Any, str], Any]


def _bad(what: str, v: Any, want: str) -> Refused:
    return Refused(f"{what} is {_shown(v)}: {want} (a forged or damaged result)")


def text(cap: int = NAME, *, optional: bool = False, lines: bool = False, pattern: re.Pattern | None = None) -> Check:
    """A string of at most ``cap`` characters, no control characters (``lines``: tabs and newlines allowed)."""
    def check(v: Any, what: str) -> str | None:
        if v is None and optional:
            return None
        if not isinstance(v, str) or len(v) > cap:
            raise _bad(what, v, f"not a string of at most {cap:,} characters")
        if (_CONTROL_BUT_LINES if lines else _CONTROL).search(v) or (pattern is not None and not pattern.match(v)):
            raise _bad(what, v, "not a valid value here")
        return v
    return check


def count(lo: int = 0, hi: int = 2 ** 53, *, optional: bool = False) -> Check:
    """An integer in [lo, hi] (not a bool)."""
    def check(v: Any, what: str) -> int | None:
        if v is None and optional:
            return None
        if type(v) is not int or not lo <= v <= hi:
            raise _bad(what, v, f"not an integer in [{lo}, {hi}]")
        return v
    return check


def flag(*, optional: bool = True) -> Check:
    def check(v: Any, what: str) -> bool | None:
        if v is None and optional:
            return None
        if type(v) is not bool:
            raise _bad(what, v, "not true or false")
        return v
    return check


def real(*, inf: bool = False) -> Check:
    """A number (finite: the parser saw to it); with ``inf``, also the string ``"inf"`` (a NaN/Inf mismatch)."""
    def check(v: Any, what: str) -> float | str:
        if inf and v == "inf":
            return v
        if type(v) not in (int, float):
            raise _bad(what, v, "not a number")
        return v
    return check


def listed(item: Check, cap: int, *, optional: bool = False) -> Check:
    def check(v: Any, what: str) -> list | None:
        if v is None and optional:
            return None
        if not isinstance(v, list) or len(v) > cap:
            raise _bad(what, v, f"not a list of at most {cap:,} items")
        return [item(x, f"{what}[{i}]") for i, x in enumerate(v)]
    return check


def record(fields: dict[str, Check], *, strict: bool, optional: bool = False, required: tuple[str, ...] = ()) -> Check:
    """An object with these fields (absent ones: None); ``strict``: any other key is refused, else dropped."""
    def check(v: Any, what: str) -> dict | None:
        if v is None and optional:
            return None
        if not isinstance(v, dict):
            raise _bad(what, v, "not an object")
        extra = sorted(str(k)[:40] for k in v if k not in fields)
        if strict and extra:
            raise Refused(f"{what} has the field {extra[0]!r}, not one of {', '.join(fields)} (a forged or damaged result)")
        missing = [k for k in required if k not in v]
        if missing:
            raise Refused(f"{what} has no {missing[0]!r}")
        return {k: fn(v.get(k), f"{what} {k}") for k, fn in fields.items() if k in v or k in required}
    return check


def plain(v: Any, what: str, depth: int = 0) -> Any:
    """A value of engine facts: strings, numbers, bools, nulls, short lists and objects, a few levels deep."""
    if v is None or type(v) in (bool, int, float):
        return v
    if isinstance(v, str):
        return text(LINE)(v, what)
    if depth >= MAX_INFO_DEPTH or not isinstance(v, (list, dict)) or len(v) > 64:
        raise _bad(what, v, f"not a plain value (lists and objects of at most 64 items, {MAX_INFO_DEPTH} levels)")
    if isinstance(v, list):
        return [plain(x, what, depth + 1) for x in v]
    return {text(NAME)(k, what + " key"): plain(x, f"{what} {k}", depth + 1) for k, x in v.items()}


def info(v: Any, what: str) -> dict | None:
    """A target's engine facts, without the model's inputs and outputs (the report has them)."""
    if v is None:
        return None
    if not isinstance(v, dict):
        raise _bad(what, v, "not an object")
    kept = plain({k: x for k, x in v.items() if k not in ("inputs", "outputs")}, what)
    size = len(json.dumps(kept))
    if size > MAX_INFO_BYTES:
        raise Refused(f"{what} is {size:,} bytes of JSON, more than {MAX_INFO_BYTES:,} (a forged or damaged result)")
    return kept


def iso_time(v: Any, what: str) -> str | None:
    if v is None:
        return None
    text(64)(v, what)
    try:
        datetime.fromisoformat(v)
    except ValueError:
        raise _bad(what, v, "not an ISO-8601 time") from None
    return v


def mapping(item: Check, cap: int, *, optional: bool = False) -> Check:
    """An object of at most ``cap`` named entries, each checked by ``item``."""
    def check(v: Any, what: str) -> dict | None:
        if v is None and optional:
            return None
        if not isinstance(v, dict) or len(v) > cap:
            raise _bad(what, v, f"not an object of at most {cap:,} entries")
        return {text(NAME)(k, what + " name"): item(x, f"{what} {k}") for k, x in v.items()}
    return check


# --- the result format ---------------------------------------------------------------------------------

_GPU = record({"vendor": text(optional=True), "architecture": text(optional=True), "device": text(optional=True),
               "description": text(LINE, optional=True), "fallback": flag()}, strict=True, optional=True)
#: the device fields each kind of result may carry, and the one that names the device
DEVICES = {
    RESULT_KIND: ("web", "user_agent", record(
        {"user_agent": text(LINE), "platform": text(optional=True), "cores": count(0, 1 << 16, optional=True), "gpu": _GPU,
         "gpu_error": text(LINE, optional=True, lines=True), "webgl": text(LINE, optional=True), "software": flag()},
        strict=True, required=("user_agent",))),
    MOBILE_RESULT_KIND: ("mobile", "machine", record(
        {"machine": text(), "platform": text(LINE, optional=True), "cpu": text(LINE, optional=True),
         "board": text(LINE, optional=True), "cores": count(0, 1 << 16, optional=True), "python": text(optional=True),
         "numpy": text(optional=True)}, strict=True, required=("machine",))),
}
_OUTPUT = record({"max_abs": real(inf=True), "cosine": real(), "ref_max_abs": real(), "size": count(),
                  "nonfinite_mismatch": count(optional=True)}, strict=True)
_TARGET = record({"id": text(128, pattern=_TARGET_ID), "status": text(32), "error": text(ERROR, optional=True, lines=True),
                  "outputs": mapping(_OUTPUT, MAX_OUTPUTS, optional=True),
                  "breaches": listed(text(4 * LINE, lines=True), 256, optional=True),
                  "latency_ms": record({"p50": real(), "samples": listed(real(), MAX_SAMPLES)}, strict=False, optional=True),
                  "info": info}, strict=False, required=("id", "status"))
_SKIPPED = record({"id": text(128), "why": text(4 * LINE, lines=True)}, strict=False)


def _document(device: Check) -> Check:
    return record({"kind": text(64), "version": count(), "bundle": text(64, optional=True, pattern=_BUNDLE_ID),
                   "model": record({"name": text(optional=True), "sha256": text(64, pattern=HEX64)}, strict=True,
                                   required=("sha256",)),
                   "inputs": text(64, optional=True, pattern=HEX64), "reference": text(128, optional=True, pattern=_TARGET_ID),
                   "created_at": iso_time, "device": device, "targets": listed(_TARGET, MAX_TARGETS),
                   "skipped": listed(_SKIPPED, MAX_TARGETS, optional=True)}, strict=False)


def checked(doc: Any, path: Path) -> dict:
    """A copy of the parsed result holding its known fields, each of its type and within its caps."""
    if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str) or doc["kind"] not in DEVICES:
        raise Refused(f"{path}: not a portability bundle result (its kind is not '{RESULT_KIND}' or '{MOBILE_RESULT_KIND}')")
    platform, named_by, device_fields = DEVICES[doc["kind"]]
    if type(doc.get("version")) is not int or doc["version"] != FORMAT_VERSION:
        raise Refused(f"{path}: result format version {_shown(doc.get('version'))}, this portability reads {FORMAT_VERSION}")
    model, device, targets = doc.get("model"), doc.get("device"), doc.get("targets")
    if not isinstance(model, dict) or not isinstance(model.get("sha256"), str) or not HEX64.match(model["sha256"]):
        raise Refused(f"{path}: no model sha256 in the result")
    if not isinstance(device, dict) or not isinstance(device.get(named_by), str) or not device[named_by]:
        raise Refused(f"{path}: no device ({named_by.replace('_', ' ')}) in the result")
    if not isinstance(targets, list) or not targets or not all(isinstance(t, dict) for t in targets):
        raise Refused(f"{path}: no targets in the result")
    try:
        out = _document(device_fields)(doc, "the result's")
    except Refused as e:
        raise Refused(f"{path}: {e}") from None
    ids = [t["id"] for t in out["targets"]]
    if len(set(ids)) != len(ids) or not all(i.startswith(platform + "/") and "@" not in i for i in ids):
        raise Refused(f"{path}: target ids must be distinct {platform} target ids, not {', '.join(ids)}")
    return out


def _shown(v: Any) -> str:
    """``v`` for a message: its repr while short, else its type and length."""
    r = repr(v)
    if len(r) <= 60:
        return r
    return f"a {type(v).__name__} of length {len(v):,}" if isinstance(v, (str, list, dict)) else r[:60] + "…"


def load(path: Path) -> dict:
    """The result file at ``path``, parsed and checked; Refused (one line: why) when it cannot be ingested."""
    return checked(parse(path), path)
