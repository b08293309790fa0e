"""``check --shape-grid``: every target converted at the first shape, then run at the others as
``TARGET~NAME=DIMS``. The model has a dynamic sequence axis; onnx2tf fixes it at the conversion shape (the
``.tflite`` input is static), and the report says so; LiteRT resizes that input at run time, so the TFLite
target runs at the second shape too."""
from __future__ import annotations

import importlib.util
import io

import numpy as np
import pytest

from conftest import by_id, check_json, run_cli

_TFLITE_MISSING = [m for m in ("onnx2tf", "tensorflow", "ai_edge_litert") if importlib.util.find_spec(m) is None]
TARGETS = ("server/ort-cpu", "server/ort-cpu-noopt", "mobile/tflite-fp32")
SHAPES = ("x=1x8x4", "x=1x16x4")


def _seq_model(path):
    """x float32 [1, seq, 4] -> MatMul [4, 3] -> y [1, seq, 3]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "seq",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_grid_lists_of_other_lengths_are_a_usage_error(tmp_path):
    p = run_cli("check", str(_seq_model(tmp_path / "seq.onnx")), "--targets", "server/ort-cpu", "--no-history",
                "--shape-grid", "x=1x8x4,1x16x4", "--shape-grid", "m=1x8")
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and "as many shapes" in ln]
    assert len(lines) == 1 and "x has 2" in lines[0] and "m has 1" in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_every_target_at_every_shape(tmp_path):
    report = check_json(tmp_path, _seq_model(tmp_path / "seq.onnx"), "--targets", ",".join(TARGETS),
                        "--shape-grid", "x=" + ",".join(s.split("=")[1] for s in SHAPES), "--runs", "2",
                        "--no-history", expect_rc=None)
    got = by_id(report)
    for tid in TARGETS:
        assert tid in got and f"{tid}~{SHAPES[1]}" in got, sorted(got)
    grid = report["inputs"]["grid"]
    assert grid["shapes"] == list(SHAPES) and grid["converted_at"] == SHAPES[0]
    assert report["inputs"]["shapes"] == {"x": [1, 8, 4]}
    for tid in TARGETS[:2]:  # ONNX Runtime takes the dynamic axis at either shape
        assert got[tid]["status"] == "pass" and got[f"{tid}~{SHAPES[1]}"]["status"] == "pass", got[tid]
        assert grid["targets"][tid] == {SHAPES[0]: "pass", SHAPES[1]: "pass"}
        assert got[f"{tid}~{SHAPES[1]}"]["details"]["grid"] == {"shape": SHAPES[1], "converted_at": SHAPES[0]}
    # the same artifact at both shapes: converted once, at the first
    assert got[TARGETS[1]]["artifact"]["sha256"] == got[f"{TARGETS[1]}~{SHAPES[1]}"]["artifact"]["sha256"]
    _renders(report)
    if _TFLITE_MISSING:
        pytest.skip(f"TFLite stack not installed: {', '.join(_TFLITE_MISSING)}")
    tfl, tfl2 = got["mobile/tflite-fp32"], got[f"mobile/tflite-fp32~{SHAPES[1]}"]
    assert tfl["status"] == "pass", tfl
    assert tfl["artifact"]["sha256"] == tfl2["artifact"]["sha256"]
    # onnx2tf fixed seq at 8 (the .tflite input has no dynamic dim), and the report says so
    fixed = grid["fixed"]["mobile/tflite-fp32"]
    assert len(fixed) == 1 and "the .tflite input x is" in fixed[0] and "'seq'" in fixed[0], fixed
    assert any(n.startswith(f"converted at {SHAPES[0]} (fixed:") for n in tfl2["notes"]), tfl2["notes"]
    assert any(n.startswith(f"mobile/tflite-fp32: converted at {SHAPES[0]} (fixed:") for n in report["notes"])
    # LiteRT resizes the fixed input at run time: the artifact converted at seq 8 runs at seq 16 and agrees
    assert tfl2["status"] == "pass", tfl2
    assert grid["targets"]["mobile/tflite-fp32"] == {SHAPES[0]: "pass", SHAPES[1]: "pass"}
    assert report["passed"] is True


def _renders(report: dict) -> None:
    """The ``~`` ids come through the Markdown, JUnit and terminal renderers intact."""
    from rich.console import Console

    from portability.report.files import write_junit
    from portability.report.markdown import render as markdown
    from portability.report.schema import Report
    from portability.report.table import render as table, versions as extra_tables

    rep = Report.from_dict(report)
    tid = f"server/ort-cpu-noopt~{SHAPES[1]}"
    md = markdown(rep)
    assert f"`{tid}`" in md and "### Shapes × targets" in md and f"| {SHAPES[0]} (converted) | {SHAPES[1]} |" in md
    console = Console(file=io.StringIO(), width=200)
    console.print(table(rep))
    for t in extra_tables(rep):
        console.print(t)
    assert tid in console.file.getvalue()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        write_junit(rep, Path(d) / "j.xml")
        assert f'name="{tid}"' in (Path(d) / "j.xml").read_text()


def test_a_calibrated_target_runs_the_artifact_calibrated_at_the_first_shape(tmp_path):
    """Calibration follows the conversion shape: the QDQ model run at the second shape is the one calibrated on
    the first shape's inputs (not a second conversion calibrated on the second's)."""
    report = check_json(tmp_path, _seq_model(tmp_path / "seq.onnx"), "--targets", "server/ort-qdq",
                        "--shape-grid", "x=" + ",".join(s.split("=")[1] for s in SHAPES), "--runs", "0",
                        "--no-history", expect_rc=None)
    got = by_id(report)
    first, second = got["server/ort-qdq"], got[f"server/ort-qdq~{SHAPES[1]}"]
    assert first["status"] == "pass" and second["status"] == "pass", (first["error"], second["error"])
    assert first["artifact"]["sha256"] == second["artifact"]["sha256"]
    steps = second["details"]["conversions"]
    assert steps and all(c["cached"] for c in steps), steps  # nothing converted again at the second shape
