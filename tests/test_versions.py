"""The runtime-version matrix (``check --versions``): each asked version of a package runs the targets that
use it in an environment of its own, built once and reused, reported as ``TARGET@VERSION`` with a
versions x targets table; a version that cannot be installed is a skipped target with the reason."""
from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, by_id, run_cli
from portability.core.errors import UsageError
from portability import matrix

#: an older ONNX Runtime with a wheel for this Python (onnxruntime#24398 went back to it)
OLD_ORT = "1.20.1"
OLD_ORT_WEB = "1.22.0"


def test_versions_are_parsed_and_mistakes_named():
    assert matrix.parse(["onnxruntime=1.20.1,1.31.1", "onnxruntime-web=1.22.0"]) == {
        "onnxruntime": ["1.20.1", "1.31.1"], "onnxruntime-web": ["1.22.0"]}
    for bad, says in (["torch=2.0"], "unknown package 'torch'"), (["onnxruntime"], "PACKAGE=V1,V2"), \
                     (["onnxruntime="], "at least one version"):
        with pytest.raises(UsageError, match=says):
            matrix.parse(bad)



def test_the_matrix_is_a_feature_of_its_own():
    """The version matrix lives in one package, ``portability.matrix``: settings read its flag through its
    seam and import nothing from the worker machinery; the planner calls it once (``expand``) and the check
    once after its run (``compare``); no other module in the package imports its inner modules."""
    import ast
    from pathlib import Path

    pkg = Path(matrix.__file__).resolve().parent.parent
    inner = {f"portability.matrix.{p.stem}" for p in (pkg / "matrix").glob("*.py") if p.stem != "__init__"}

    def imports(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        return {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | \
            {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}

    def calls(path: Path) -> list[str]:
        return [n.func.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id == "matrix"]

    assert not (pkg / "workers" / "versions.py").exists()
    for path in sorted((pkg / "settings").rglob("*.py")):
        assert not [m for m in imports(path) if m.startswith("portability.workers")], path.name
    for path in pkg.rglob("*.py"):
        if path.parent.name != "matrix":
            assert not imports(path) & inner, f"{path.relative_to(pkg)} imports {sorted(imports(path) & inner)}"
    assert calls(pkg / "engine" / "plan.py") == ["expand"] and calls(pkg / "engine" / "pipeline.py") == ["compare"]
    assert matrix.__all__ == ["parse", "expand", "compare"]
    assert matrix.expand([], {}) == ([], {}, {}) and matrix.compare([], {}, {}) == {}

def test_an_older_onnxruntime_runs_beside_the_installed_one_and_its_environment_is_reused(tmp_path):
    out = tmp_path / "r.json"
    args = ("check", str(FIXTURES / "lenet.onnx"), "--targets", "server/ort-cpu,server/ort-cpu-noopt",
            "--versions", f"onnxruntime={OLD_ORT}", "--json", str(out), "--cache-dir", str(tmp_path / "cache"))
    p = run_cli(*args)
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(out.read_text())
    t = by_id(report)
    old = t[f"server/ort-cpu@{OLD_ORT}"]
    assert old["status"] == "pass" and old["runtime"] == f"onnxruntime {OLD_ORT}" and not old["gating"]
    assert t["server/ort-cpu"]["runtime"] != old["runtime"]
    rows = {r["target"]: r for r in report["versions"]["rows"]}
    assert set(rows) == {"server/ort-cpu", "server/ort-cpu-noopt"}
    assert rows["server/ort-cpu"]["cells"][OLD_ORT]["worst_max_abs_vs_others"] is not None
    assert f"onnxruntime {OLD_ORT}" in p.stdout  # the matrix table
    p2 = run_cli(*args)
    assert p2.returncode == 0 and "building the environment" in p.stderr and "building the environment" not in p2.stderr


@pytest.mark.web
def test_an_older_onnxruntime_web_runs_in_the_browser_beside_the_installed_one(tmp_path):
    from portability.web.paths import web_availability

    ok = web_availability({"onnxruntime-web": "dist/ort.wasm.min.mjs"})
    if not ok.ok:
        pytest.skip(ok.reason)
    out = tmp_path / "r.json"
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--targets", "web/ort-wasm", "--versions",
                f"onnxruntime-web={OLD_ORT_WEB}", "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    t = by_id(json.loads(out.read_text()))
    assert t[f"web/ort-wasm@{OLD_ORT_WEB}"]["status"] == "pass"
    assert t[f"web/ort-wasm@{OLD_ORT_WEB}"]["runtime"].startswith(f"onnxruntime-web {OLD_ORT_WEB}")
    assert not t["web/ort-wasm"]["runtime"].startswith(f"onnxruntime-web {OLD_ORT_WEB}")


def test_a_version_that_cannot_be_installed_is_a_skipped_target_with_the_reason(tmp_path):
    out = tmp_path / "r.json"
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--targets", "server/ort-cpu", "--versions",
                "onnxruntime=0.0.1", "--json", str(out))
    assert p.returncode == 0, p.stderr
    t = by_id(json.loads(out.read_text()))["server/ort-cpu@0.0.1"]
    assert t["status"] == "skipped" and "onnxruntime 0.0.1 cannot be installed here" in t["error"]
