"""One status type, end to end: every module speaks ``Status`` (a misspelt member fails at import, a
misspelt string would miss silently at run time), the audit's per-model result is a target's status, and
a target whose runtime dies by a signal is what ``check --fix`` and ``localize`` work on."""
from __future__ import annotations

import ast
from pathlib import Path

from portability.core.status import STATUSES, Status

PKG = Path(__file__).resolve().parent.parent / "portability"

#: where a status's word names something else: (module, word) -> what it names there
NOT_A_STATUS = {
    ("settings/options.py", "timeout"): "the timeout setting's name",
    ("metrics/drift.py", "drift"): "a kind of change between two runs",
}


def _named_constant(node: ast.AST, parents: dict) -> bool:
    """``NAME = "word"`` at a module's top: a constant that names what the word means there."""
    up = parents.get(node)
    return (isinstance(up, ast.Assign) and isinstance(parents.get(up), ast.Module) and up.value is node
            and all(isinstance(t, ast.Name) and t.id.isupper() for t in up.targets))


def _field_name(node: ast.AST, parents: dict) -> bool:
    """A record's field name: ``x["word"]``, ``x.get("word")``, or a key of a dict display whose keys are
    not all statuses (a record, not a map keyed by status)."""
    up = parents.get(node)
    if isinstance(up, ast.Subscript) and up.slice is node:
        return True
    if (isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute) and up.func.attr in ("get", "setdefault")
            and up.args and up.args[0] is node):
        return True
    if isinstance(up, ast.Dict) and node in up.keys:
        return not all(isinstance(k, ast.Constant) and k.value in STATUSES for k in up.keys)
    return False


def status_literals(root: Path = PKG) -> list[str]:
    """Every status word written as a string literal outside ``core/status.py``: ``module:line word``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "core/status.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in STATUSES):
                continue
            if (rel, node.value) in NOT_A_STATUS or _named_constant(node, parents) or _field_name(node, parents):
                continue
            found.append(f"{rel}:{node.lineno} {node.value!r}")
    return found


def test_no_status_is_written_as_a_string_outside_its_type():
    """Statuses are ``Status`` members (or ``FAILING`` / ``ERRORS`` / ``COMPARED`` ...) everywhere: strings
    only where a report is written or read, which ``to_dict`` / ``from_dict`` do without literals."""
    found = status_literals()
    assert not found, "status words written as strings (use Status.X from portability.core.status):\n  " + "\n  ".join(found)


def test_the_scan_finds_a_misspelt_and_a_literal_status(tmp_path):
    (tmp_path / "m.py").write_text('FAILED = ("drift", "crashed")\nok = t.status == "pass"\nrow = t["pass"]\n'
                                   'ICON = {"pass": 1}\nKIND = "drift"\n')
    assert status_literals(tmp_path) == ["m.py:1 'drift'", "m.py:1 'crashed'", "m.py:2 'pass'", "m.py:4 'pass'"]


def test_a_worker_result_and_a_target_result_read_their_status_as_a_member_and_write_it_as_text():
    import json

    from portability.core.protocol import WorkerResult
    from portability.core.status import OK
    from portability.report.schema import TargetResult

    wr = WorkerResult.from_dict({"status": "crashed", "error": "killed by SIGSEGV"})
    assert wr.status is Status.CRASHED and not wr.ok and WorkerResult.from_dict({"status": "ok"}).status == OK
    assert type(wr.to_dict()["status"]) is str and wr.to_dict()["status"] == "crashed"
    t = TargetResult.from_dict({"id": "server/x", "platform": "server", "status": "drift", "gating": True})
    assert t.status is Status.DRIFT and t.failed
    assert json.dumps(t.to_dict()["status"]) == '"drift"' and type(t.to_dict()["status"]) is str
    try:
        WorkerResult.from_dict({"status": "crash"})
    except ValueError as e:
        assert "unknown worker status 'crash'" in str(e)
    else:
        raise AssertionError("a misspelt status was taken")


# -- a target whose runtime dies by a signal: a real SIGSEGV in its worker (tests/doubles.py, test/segv) ------

DOUBLES = {"PORTABILITY_PLUGINS": "doubles"}


def test_check_fix_tries_the_alternatives_for_a_target_whose_runtime_crashed(tmp_path):
    from conftest import FIXTURES, by_id, check_json

    r = check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "test/segv", "--runs", "0", "--fix", "--no-history",
                   env=DOUBLES, expect_rc=1)
    t = by_id(r)["test/segv"]
    assert t["status"] == "crashed" and "SIGSEGV" in t["error"], t
    fix = t["details"]["fix"]
    assert "why" not in fix and fix["tried"], fix  # not "nothing to fix"
    assert fix["passing"] is not None and fix["passing"]["alternative"] == "ONNX Runtime graph optimizations basic"
    assert fix["tried"][-1]["status"] == "pass"


def test_localize_counts_a_crashed_cut_as_an_error_and_names_the_node(tmp_path):
    import json

    from conftest import FIXTURES, run_cli

    p = run_cli("localize", str(FIXTURES / "mlp.onnx"), "--target", "test/segv", "--out", str(tmp_path / "loc"),
                "--json", str(tmp_path / "loc.json"), env=DOUBLES)
    assert p.returncode == 1, p.stderr[-3000:] + p.stdout[-2000:]
    doc = json.loads((tmp_path / "loc.json").read_text())
    assert doc["status"] == "crashed" and doc["mode"] == "error", doc
    first = doc["first_divergence"]
    assert first is not None and first["op_type"] == "Relu", doc
    assert "SIGSEGV" in (first.get("error") or ""), first
    assert all(not c["diverges"] for c in doc["curve"] if c["index"] < first["index"])


# -- the audit speaks the check's words ----------------------------------------------------------------------

def _target(tid: str, status: str, gating: bool = True) -> dict:
    return {"id": tid, "platform": tid.split("/")[0], "status": status, "gating": gating}


def test_a_models_status_is_pass_or_its_worst_failing_gating_target():
    from portability.audit.unit import model_status

    ts = [_target("server/ort-cpu", "pass"), _target("web/a", "drift"), _target("web/b", "convert-error"),
          _target("server/onnx-reference", "crashed", gating=False), _target("web/c", "skipped")]
    assert model_status(False, ts) is Status.CONVERT_ERROR  # the cross-check's crash does not count
    assert model_status(False, [_target("web/x", "drift", gating=False)]) is Status.DRIFT
    assert model_status(True, ts) is Status.PASS


def test_a_model_result_crosses_json_as_text_and_reads_the_older_words():
    import json

    from portability.audit.unit import ModelResult

    m = ModelResult.from_dict({"path": "m.onnx", "status": "drift", "error": None,
                               "targets": [_target("server/ort-cpu", "pass"), _target("web/a", "drift")]})
    assert m.status is Status.DRIFT and m.targets[1]["status"] is Status.DRIFT and not m.passed and not m.refused
    text = json.dumps(m.to_dict())
    assert ModelResult.from_dict(json.loads(text)) == m and '"status": "drift"' in text
    # an audit state written with passed / failed / error: resumed in the check's words
    old = {"path": "m.onnx", "error": None, "targets": [_target("server/ort-cpu", "pass"), _target("web/a", "timeout")]}
    assert ModelResult.from_dict({**old, "status": "failed"}).status is Status.TIMEOUT
    assert ModelResult.from_dict({**old, "status": "passed"}).status is Status.PASS
    refused = ModelResult.from_dict({"path": "bad.onnx", "status": "error", "error": "not a model", "targets": []})
    assert refused.status is Status.LOAD_ERROR and refused.refused and refused.error == "not a model"


def test_an_audit_resumes_a_state_written_with_the_older_words(tmp_path):
    import shutil

    from portability.audit.corpus import Item, State
    from portability.audit.run import run

    from conftest import FIXTURES

    shutil.copyfile(FIXTURES / "mlp.onnx", tmp_path / "m.onnx")
    item = Item(tmp_path / "m.onnx", {})
    state = State(tmp_path)
    key = item.key({})
    state.put(key, {"path": str(item.path), "status": "failed", "error": None,
                    "targets": [_target("server/ort-cpu", "pass"), _target("web/a", "load-error")]})
    [entry] = run(None, {}, corpus=([item], {}, tmp_path))
    assert entry.resumed and entry.status is Status.LOAD_ERROR and entry.to_dict()["status"] == "load-error"


def test_a_failure_s_message_keeps_no_terminal_colours():
    """torch.onnx colours its failure's words for a terminal; a report holds the words alone."""
    from portability.core.protocol import WorkerResult

    w = WorkerResult.failed(Status.CONVERT_ERROR, "failed. \x1b[96mThis is step 2/3\x1b[0m of exporting")
    assert w.error == "failed. This is step 2/3 of exporting"
    assert WorkerResult.from_dict(w.to_dict()).error == w.error
