"""``portability ingest`` of hostile result files: each refused with one line and exit 2, nothing written;
and the history it writes kept private (a 0700 folder, 0600 files).

No browser or device here: a report and a result are written by hand, of the shape ``bundle`` and the page
make (``portability/bundle/page/bundle.mjs``, ``portability/bundle/runner/run.py``)."""
from __future__ import annotations

import copy
import json
import os
import stat
import sys
from pathlib import Path

import pytest

SHA = "a" * 64
INPUTS = "b" * 64
REPORT = {
    "schema_version": 1, "tool": {"name": "portability", "version": "0"}, "created_at": "2025-01-01T00:00:00+00:00",
    "environment": {"python": "3", "platform": "linux"},
    "model": {"path": "m.onnx", "sha256": SHA, "outputs": [{"name": "y", "dtype": "float32", "shape": [1, 10]}]},
    "inputs": {"source": "synthesized", "samples": 1, "seed": 0}, "reference": "server/ort-cpu",
    "targets": [{"id": "server/ort-cpu", "platform": "server", "status": "pass", "gating": True},
                {"id": "web/ort-wasm", "platform": "web", "status": "pass", "gating": True, "runtime": "onnxruntime-web",
                 "device": "cpu", "thresholds": {"max_abs": 1e-4, "cosine": 0.9999}}],
    "passed": True,
}
RESULT = {
    "kind": "portability-web-result", "version": 1, "bundle": "0123456789abcdef", "model": {"name": "m.onnx", "sha256": SHA},
    "inputs": INPUTS, "reference": "server/ort-cpu", "created_at": "2025-01-02T03:04:05.678Z",
    "device": {"user_agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0.0.0 Safari/537.36", "platform": "Linux",
               "cores": 8, "gpu": None, "webgl": "ANGLE (Mesa)", "software": False},
    "targets": [{"id": "web/ort-wasm", "status": "pass", "error": None, "breaches": [],
                 "outputs": {"y": {"max_abs": 1e-6, "cosine": 1.0, "ref_max_abs": 2.0, "size": 10}},
                 "latency_ms": {"p50": 2.0, "samples": [3.0, 1.0, 2.0]},
                 "info": {"runtime": "onnxruntime-web", "version": "1.20.1", "ep": "wasm", "threads": 4, "simd": True,
                          "device": None, "inputs": ["x"], "outputs": ["y"]}}],
}


@pytest.fixture
def data(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "data"
    monkeypatch.setenv("PORTABILITY_DATA_DIR", str(folder))
    return folder


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """(exit code, stderr) of the command line, run in this process."""
    from portability.cli.main import main

    monkeypatch.setattr(sys, "argv", ["portability", *args])
    with pytest.raises(SystemExit) as e:
        main()
    return e.value.code, capsys.readouterr().err


def _rows(data: Path) -> int:
    if not (data / "history.sqlite").exists():
        return 0
    from portability.report.history import History

    with History(data / "history.sqlite") as h:
        return h.count()


def _ingest(tmp_path: Path, monkeypatch, capsys, text: str | bytes) -> tuple[int, str, Path]:
    report, result, out = tmp_path / "report.json", tmp_path / "result.json", tmp_path / "joined.json"
    report.write_text(json.dumps(REPORT))
    result.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    rc, err = _cli(monkeypatch, capsys, "ingest", str(result), "--report", str(report), "--out", str(out))
    return rc, err, out


def _refused(tmp_path, monkeypatch, capsys, data, text) -> str:
    rc, err, out = _ingest(tmp_path, monkeypatch, capsys, text)
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert not out.exists() and _rows(data) == 0
    return lines[0]


def _with(path: str, value) -> str:
    """RESULT with the field at ``path`` (dot-separated; digits index lists) set to ``value``, as JSON text."""
    doc = copy.deepcopy(RESULT)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = doc
    for p in parents:
        node = node[p]
    node[last] = value
    return json.dumps(doc)


def _raw(path: str, literal: str) -> str:
    """RESULT with the field at ``path`` written as the raw JSON ``literal`` (numbers json cannot dump)."""
    return _with(path, "@@RAW@@").replace('"@@RAW@@"', literal)


def test_a_good_result_is_joined_with_its_fields_as_checked(tmp_path, monkeypatch, capsys, data):
    rc, err, out = _ingest(tmp_path, monkeypatch, capsys, json.dumps(RESULT))
    assert rc == 0, err
    assert _rows(data) == 1
    [got] = [t for t in json.loads(out.read_text())["targets"] if t["id"].startswith("web/ort-wasm@")]
    assert got["status"] == "pass" and got["metrics"]["latency_ms"] == {"p50": 2.0, "samples": [3.0, 1.0, 2.0]}
    assert got["details"]["device"] == RESULT["device"]
    assert "inputs" not in got["details"]["engine"] and got["details"]["engine"]["threads"] == 4
    assert got["details"]["ingested"]["ran_at"] == RESULT["created_at"]


HOSTILE = {
    # numbers: overflowing, non-finite, over-long literals
    "size 1e400": (_raw("targets.0.outputs.y.size", "1e400"), "beyond a double's range"),
    "nonfinite_mismatch 1e400": (_raw("targets.0.outputs.y.nonfinite_mismatch", "1e400"), "beyond a double's range"),
    "a 5,001-digit integer": (_raw("targets.0.outputs.y.size", "9" * 5001), "5,001 digits"),
    "a 400-character float": (_raw("targets.0.outputs.y.cosine", "0." + "9" * 400), "characters"),
    "NaN": (_raw("targets.0.outputs.y.max_abs", "NaN"), "NaN (not a JSON number)"),
    "-Infinity": (_raw("targets.0.latency_ms.p50", "-Infinity"), "-Infinity"),
    # nesting
    "200,000 [": ("[" * 200_000, "nested 200,000 deep"),
    "a device 950 levels deep": (_raw("device.gpu", "[" * 950 + "]" * 950), "nested 952 deep"),
    "an info object 12 levels deep": (_raw("targets.0.info.device", '{"a":' * 12 + "1" + "}" * 12), "not a plain value"),
    # types: bool is not a number, strings are not numbers
    "version true": (_with("version", True), "result format version True"),
    "size true": (_with("targets.0.outputs.y.size", True), "not an integer"),
    "a latency sample true": (_with("targets.0.latency_ms.samples.1", True), "not a number"),
    "size 10.5": (_with("targets.0.outputs.y.size", 10.5), "not an integer"),
    "ref_max_abs 'inf'": (_with("targets.0.outputs.y.ref_max_abs", "inf"), "not a number"),
    "cores as text": (_with("device.cores", "8"), "not an integer"),
    "targets an object": (_with("targets", {}), "no targets"),
    "outputs a list": (_with("targets.0.outputs", [1]), "not an object"),
    "info a string": (_with("targets.0.info", "x"), "not an object"),
    "created_at not a time": (_with("created_at", "yesterday"), "ISO-8601"),
    # caps and allow-lists
    "a 1 MB user agent": (_with("device.user_agent", "M" * 1_000_000), "at most 1,024 characters"),
    "a 60 KB info": (_with("targets.0.info", {f"k{i}": "v" * 1000 for i in range(60)}), "bytes of JSON"),
    "20,000 latency samples": (_with("targets.0.latency_ms.samples", [1.0] * 20_000), "at most 10,000 items"),
    "an unknown device key": (_with("device.serial", "x"), "'serial'"),
    "an unknown gpu key": (_with("device.gpu", {"vendor": "v", "blob": "x"}), "'blob'"),
    "an unknown output metric": (_with("targets.0.outputs.y.note", 1), "'note'"),
    "65 targets": (_with("targets", [RESULT["targets"][0]] * 65), "at most 64 items"),
    "a control character": (_with("device.platform", "Linux\x1b[2J"), "not a valid value"),
    "a lone surrogate": (_raw("targets.0.info.version", '"\\ud800"'), "not a valid value"),
    # ids and paths
    "a ../ target id": (_with("targets.0.id", "web/../../etc"), "not a valid value"),
    "another platform's target id": (_with("targets.0.id", "mobile/ort-mobile"), "target ids must be"),
    "a target id with @": (_with("targets.0.id", "web/ort-wasm@x"), "not a valid value"),
    "a bundle id that is a path": (_with("bundle", "../../x"), "not a valid value"),
    # what refused before stays refused
    "truncated": (json.dumps(RESULT)[:300], "not a complete JSON"),
    "garbage": (b"\x89PNG\r\n\x1a\n\x00\xff", "not UTF-8"),
    "not a result": ('{"kind": "x"}', "not a portability bundle result"),
    "a kind that is a list": (_with("kind", []), "not a portability bundle result"),
    "a mobile device with an unknown key": (json.dumps({**RESULT, "kind": "portability-mobile-result",
                                                        "device": {"machine": "aarch64", "imei": "1"}}), "'imei'"),
    "another model": (_with("model.sha256", "f" * 64), "not the same model"),
    "a wrong-type status": (_with("targets.0.status", 1), "not a string"),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_hostile_result_refused(case, tmp_path, monkeypatch, capsys, data):
    text, why = HOSTILE[case]
    assert why in _refused(tmp_path, monkeypatch, capsys, data, text)


def test_a_large_file_is_refused_before_it_is_read(tmp_path, monkeypatch, capsys, data):
    """200 MB (sparse: nothing is written) is refused by its size, naming the limit."""
    from portability.bundle.result_file import MAX_BYTES

    report, result = tmp_path / "report.json", tmp_path / "result.json"
    report.write_text(json.dumps(REPORT))
    with open(result, "wb") as f:
        f.truncate(200 * 1024 * 1024)
    rc, err = _cli(monkeypatch, capsys, "ingest", str(result), "--report", str(report))
    assert rc == 2 and err.count("\n") == 1 and f"{MAX_BYTES:,} bytes at most" in err, err
    assert _rows(data) == 0


def test_a_file_that_grows_past_the_limit_is_not_read_whole(tmp_path, monkeypatch):
    """A file whose size the file system does not tell (a pipe, a device) is read up to the limit only."""
    from portability.bundle import result_file

    monkeypatch.setattr(result_file, "MAX_BYTES", 1000)
    with pytest.raises(result_file.Refused, match="larger than a result file can be"):
        result_file.parse(Path("/dev/zero"))


def test_an_error_text_with_markup_is_printed_as_it_is(tmp_path, monkeypatch, capsys, data):
    target = {"id": "web/ort-wasm", "status": "run-error", "error": "session: [/] [bold]x[/bold]\ttab\nline",
              "outputs": {}, "breaches": [], "latency_ms": None, "info": None}
    rc, err, _ = _ingest(tmp_path, monkeypatch, capsys, _with("targets", [target]))
    assert rc == 0, err
    assert "[/] [bold]x[/bold]" in err and _rows(data) == 1


def _modes(folder: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.iterdir()]}


def test_history_is_private(tmp_path, monkeypatch, capsys, data):
    """One history write in a new data folder: the folder 0700; the database and its -wal and -shm files 0600,
    while the connection is open and after (whatever the umask)."""
    from portability.report.history import History
    from portability.report.schema import Report

    old = os.umask(0o002)
    try:
        with History() as h:
            h.record(Report.from_dict(REPORT))
            open_modes = _modes(data)
        rc, err, _ = _ingest(tmp_path, monkeypatch, capsys, json.dumps(RESULT))
    finally:
        os.umask(old)
    assert rc == 0, err
    assert {"history.sqlite", "history.sqlite-wal", "history.sqlite-shm"} <= set(open_modes), open_modes
    for modes in (open_modes, _modes(data)):
        assert modes.pop("data") == 0o700
        assert set(modes.values()) == {0o600}, {k: oct(v) for k, v in modes.items()}


def test_an_existing_history_is_made_private(tmp_path, monkeypatch, data):
    data.mkdir(mode=0o755)
    db = data / "history.sqlite"
    db.touch(mode=0o644)
    os.chmod(db, 0o644)
    from portability.report.history import History

    with History():
        pass
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
