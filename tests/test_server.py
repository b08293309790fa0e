"""Every server runtime, really run on the fixtures; the report contract; the artifact cache."""
import json
import os

import pytest

from conftest import FIXTURES, by_id, check_json, run_cli
from portability.report.schema import STATUSES, Report

FIXTURE_MODELS = ["lenet.onnx", "mlp.onnx", "mlp_dynamic.onnx", "two_outputs.onnx", "int64_ids.onnx", "external/mlp.onnx"]


ORT_AND_REFERENCE = "server/ort-cpu-noopt,server/onnx-reference,server/ort-cuda"  # server/tf: test_server_tf.py
#: server/ort-cuda is named but skipped without a GPU: a named target that cannot run fails the run unless allowed
ALLOW = "--allow-skipped"


def test_every_server_target_is_in_the_report(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "server", "--runs", "2")
    t = by_id(r)
    assert set(t) == {"server/ort-cpu", "server/ort-cpu-noopt", "server/ort-cpu-1thread", "server/onnx-reference",
                      "server/tf", "server/ort-cuda", "server/ort-int8", "server/ort-qdq", "server/ort-fp16", "server/ort-q4",
                      "server/openvino", "server/openvino-default"}
    assert all(x["status"] in ("pass", "skipped") for x in t.values()), t
    assert t["server/ort-cpu-1thread"]["details"]["threads"] == 1  # the session really ran on one intra-op thread
    assert "threads" not in t["server/ort-cpu"]["details"]


@pytest.mark.parametrize("name", FIXTURE_MODELS)
def test_server_targets_on_fixture(tmp_path, name):
    r = check_json(tmp_path, FIXTURES / name, "--targets", ORT_AND_REFERENCE, "--runs", "5", ALLOW)
    t = by_id(r)
    assert set(t) == {"server/ort-cpu", "server/ort-cpu-noopt", "server/onnx-reference", "server/ort-cuda"}
    for tid in ("server/ort-cpu", "server/ort-cpu-noopt", "server/onnx-reference"):
        assert t[tid]["status"] == "pass", (tid, t[tid])
        timed = t[tid]["metrics"]["latency_ms"]  # the spec's Python evaluator is compared, not timed: no device's speed
        assert (timed["runs"] == 5) if tid != "server/onnx-reference" else (timed is None)
        art = t[tid]["artifact"]
        assert art["files"] == 1  # the snapshot is one self-contained file (external data folded in)
        assert abs(art["size_bytes"] - r["model"]["size_bytes"]) <= 0.05 * r["model"]["size_bytes"]
    for tid in ("server/ort-cpu-noopt", "server/onnx-reference"):
        outs = t[tid]["metrics"]["outputs"]
        assert set(outs) == {o["name"] for o in r["model"]["outputs"]}
        assert all(o["max_abs"] < 1e-4 and o["cosine"] > 0.9999 for o in outs.values())
    assert t["server/onnx-reference"]["gating"] is False
    assert r["passed"] is True


def test_cuda_target_honest_status(tmp_path):
    import glob

    gpu = bool(glob.glob("/dev/nvidia[0-9]*"))
    # named by its id, it is required: without a GPU the run fails (exit 1), saying why
    r = check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "server/ort-cuda", "--runs", "2", expect_rc=None if gpu else 1)
    cuda = by_id(r)["server/ort-cuda"]
    if not gpu:
        assert cuda["status"] == "skipped" and "GPU" in cuda["error"] and cuda["hint"]
        assert r["passed"] is False and any("server/ort-cuda" in n for n in r["notes"])
    else:
        assert cuda["status"] in ("pass", "skipped", "fallback"), cuda


def test_report_schema_v1(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", ORT_AND_REFERENCE, "--runs", "3", ALLOW)
    assert r["schema_version"] == 1 and r["tool"]["name"] == "portability"
    assert {"python", "platform", "cpu", "packages"} <= set(r["environment"])
    assert r["environment"]["packages"]["onnxruntime"]
    m = r["model"]
    assert len(m["sha256"]) == 64 and m["opset"] == 18 and m["inputs"][0] == {"name": "x", "dtype": "float32", "shape": [1, 1, 28, 28]}
    assert r["inputs"] == {**r["inputs"], "source": "synthesized", "samples": 8, "seed": 0}
    assert r["reference"] == "server/ort-cpu" and r["targets"][0]["id"] == "server/ort-cpu"
    for t in r["targets"]:
        assert t["status"] in STATUSES
        for key in ("id", "platform", "runtime", "device", "status", "gating", "error", "artifact", "metrics", "thresholds"):
            assert key in t
    noopt = by_id(r)["server/ort-cpu-noopt"]
    for key in ("outputs", "top1_agreement", "accuracy", "accuracy_delta", "latency_ms", "peak_rss_mb", "robustness"):
        assert key in noopt["metrics"]
    assert set(noopt["metrics"]["latency_ms"]) >= {"load", "first", "p50", "p90", "p99", "runs"}
    assert set(noopt["metrics"]["outputs"]["logits"]) >= {"max_abs", "max_rel", "mean_abs", "rmse", "p99_abs", "cosine"}
    assert noopt["artifact"]["gzip_bytes"] < noopt["artifact"]["size_bytes"]
    assert noopt["metrics"]["peak_rss_mb"] > 10
    assert Report.from_dict(r).to_dict()["targets"] == r["targets"]  # round trip


def test_cache_second_run_converts_nothing(tmp_path):
    cache = tmp_path / "c"
    env = {"PORTABILITY_CACHE_DIR": str(cache)}
    first = check_json(tmp_path, FIXTURES / "mlp.onnx", "-t", ORT_AND_REFERENCE, ALLOW, "--runs", "0", env=env)
    second = check_json(tmp_path, FIXTURES / "mlp.onnx", "-t", ORT_AND_REFERENCE, ALLOW, "--runs", "0", env=env)
    conv = lambda r: [c["cached"] for t in r["targets"] for c in t["details"].get("conversions", [])]  # noqa: E731
    ran = sum(t["status"] != "skipped" for t in second["targets"])
    assert conv(first)[0] is False and all(conv(second)) and len(conv(second)) == ran >= 3
    entries = list((cache / "artifacts").glob("*/*/artifact.json"))
    assert len(entries) == 1
    # the entry's size was measured once, when it was made: a cached run reports it, and it is the files' own
    from portability.core.artifact import Artifact, size_info

    made = Artifact.from_dict(json.loads(entries[0].read_text()))
    assert made.size == size_info(sorted(p for p in entries[0].parent.rglob("*") if p.name != "artifact.json"))
    for t in second["targets"]:
        if t["status"] != "skipped":
            assert {k: t["artifact"][k] for k in made.size} == made.size, t["id"]
    # an entry made before entries recorded their size: measured when next used, and recorded
    entries[0].write_text(json.dumps({k: v for k, v in json.loads(entries[0].read_text()).items() if k != "size"}))
    check_json(tmp_path, FIXTURES / "mlp.onnx", "-t", "server/ort-cpu-noopt", "--runs", "0", env=env)
    assert Artifact.from_dict(json.loads(entries[0].read_text())).size == made.size
    nocache = check_json(tmp_path, FIXTURES / "mlp.onnx", "-t", ORT_AND_REFERENCE, ALLOW, "--runs", "0", "--no-cache", env=env)
    assert not any(conv(nocache))
    assert len(list((cache / "artifacts").glob("*/*/artifact.json"))) == 1


def test_junit_and_table_output(tmp_path):
    p = run_cli("check", str(FIXTURES / "mlp.onnx"), "-t", ORT_AND_REFERENCE, ALLOW, "--runs", "2", "--junit", str(tmp_path / "j.xml"))
    assert p.returncode == 0, p.stderr
    assert "server/ort-cpu-noopt" in p.stdout and "pass" in p.stdout
    xml = (tmp_path / "j.xml").read_text()
    assert 'tests="4"' in xml and 'failures="0"' in xml and xml.count("<testcase") == 4
    assert "server/onnx-reference" in xml


def test_targets_command_lists_availability():
    p = run_cli("targets", "--json")
    rows = {r["id"]: r for r in json.loads(p.stdout)}
    assert rows["server/ort-cpu"]["available"] is True
    assert rows["server/onnx-reference"]["gating"] is False


def test_unknown_target_is_a_usage_error():
    p = run_cli("check", str(FIXTURES / "mlp.onnx"), "--targets", "server/ort-fancy")
    assert p.returncode == 2 and "unknown target 'server/ort-fancy'" in p.stderr


def test_output_whose_shape_varies_is_compared_batch_by_batch(tmp_path):
    """NonZero: the output's shape follows the input values, so each batch is compared on its own."""
    from onnx import TensorProto, helper, save

    g = helper.make_graph([helper.make_node("Greater", ["x", "half"], ["m"]), helper.make_node("NonZero", ["m"], ["idx"])],
                          "nz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("idx", TensorProto.INT64, [2, None])],
                          [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    save(m, tmp_path / "nz.onnx")
    r = check_json(tmp_path, tmp_path / "nz.onnx", "-t", ORT_AND_REFERENCE, ALLOW, "--runs", "0")
    noopt = by_id(r)["server/ort-cpu-noopt"]
    assert noopt["status"] == "pass" and noopt["metrics"]["outputs"]["idx"]["max_abs"] == 0.0


def test_damaged_cache_entry_is_rebuilt(tmp_path):
    env = {"PORTABILITY_CACHE_DIR": str(tmp_path / "c")}
    check_json(tmp_path, FIXTURES / "mlp.onnx", "-t", "server/ort-cpu", "--runs", "0", env=env)
    (model,) = (tmp_path / "c" / "artifacts").glob("*/*/model.onnx")
    model.unlink()
    r = check_json(tmp_path, FIXTURES / "mlp.onnx", "-t", "server/ort-cpu", "--runs", "0", env=env)
    assert r["targets"][0]["details"]["conversions"][0]["cached"] is False and model.is_file()


def test_unwritable_report_path_is_a_usage_error(tmp_path):
    p = run_cli("check", str(FIXTURES / "mlp.onnx"), "--json", str(tmp_path / "no" / "such" / "r.json"))
    assert p.returncode == 2 and "cannot write a report" in p.stderr


def test_the_onnx_reference_names_the_node_it_fails_at(tmp_path):
    """The reference evaluator's own errors name no node: the runtime says which one it was running."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from portability.core.artifact import Artifact
    from portability.core.errors import RunError
    from portability.runtimes.onnx_reference import OnnxReference

    # a Reshape whose target shape comes from the input's values: valid for ONNX, wrong for this input
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="first"),
                           helper.make_node("Reshape", ["r", "s"], ["y"], name="the_reshape")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    rt = OnnxReference()
    rt.load(Artifact(path=tmp_path / "m.onnx", format="onnx", sha256=""))
    x = np.ones((1, 4), np.float32)
    assert rt.infer({"x": x, "s": np.array([2, 2], np.int64)})["y"].shape == (2, 2)
    with pytest.raises(RunError) as e:
        rt.infer({"x": x, "s": np.array([3, 3], np.int64)})
    assert e.value.op == "Reshape" and e.value.node == "the_reshape", str(e.value)
    assert "at Reshape node 'the_reshape'" in str(e.value)


def test_a_fallback_to_the_cpu_says_why_in_the_runtime_s_own_words():
    """ONNX Runtime falls back to the CPU when its CUDA provider cannot start, saying why only on its output
    streams: the runtime reads them (native writes included) and the verdict quotes the reason."""
    from portability.core.protocol import WorkerResult
    from portability.core.status import Status
    from portability.core.target import Target
    from portability.engine.verdict import decide
    from portability.runtimes.ort import _output_of, fallback_reason

    line = ("CUDA failure 100: no CUDA-capable device is detected ; GPU=-1 ; hostname=vm ; "
            "expr=cudaSetDevice(info_.device_id);")
    text = _output_of(lambda: (os.write(1, b"*** EP Error ***\nEP Error cuda_call.cc:154 " + line.encode() + b"\n"),
                               os.write(2, b"[W:onnxruntime:Default, telemetry_1ds.cc:600] Failed to persist\n")))
    assert line in text and "[W:onnxruntime" in text
    why = fallback_reason(text)
    assert why == line
    worker = WorkerResult("ok", backend_requested="CUDAExecutionProvider", backend_used="CPUExecutionProvider",
                          details={"fallback_reason": why})
    v = decide(Target(id="server/ort-cuda", runtime="portability.runtimes.ort:OrtCuda"), [], worker, [])
    assert v.status == Status.FALLBACK
    assert v.breaches[0] == f"asked for CUDAExecutionProvider, ran on CPUExecutionProvider: {line}"
