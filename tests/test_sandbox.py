"""The OS sandbox (``portability/core/sandbox.py``): what a confined process can and cannot touch, and that
the sandbox alone — with the allow-lists switched off by their debug switch — stops a hostile model's file
read and file write outside its folder, where the same model without the sandbox does both."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, by_id, run_cli
from portability.core import sandbox

pytestmark = pytest.mark.skipif(not sandbox.status()[0], reason=f"no OS sandbox here: {sandbox.status()[1]}")

#: the allow-lists' debug switch: only the OS sandbox stands between the model and the machine
NO_ALLOWLISTS = {"PORTABILITY_DEBUG_NO_ALLOWLISTS": "1"}


def _confined(tmp_path: Path, code: str, **spec) -> dict:
    """Run ``code`` (which fills a dict ``out``) in a child that entered ``Sandbox(**spec)``; ``out``."""
    prog = textwrap.dedent("""
        import json, os, sys
        from portability.core.sandbox import Sandbox, enter
        why = enter(Sandbox(**json.loads(sys.argv[1])))
        out = {"why": why}
        def attempt(name, fn):
            try:
                out[name] = fn()
            except OSError as e:
                out[name] = f"denied: {e.strerror}"
    """) + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    spec = {"mode": "require", **{k: list(v) if isinstance(v, tuple) else v for k, v in spec.items()}}
    p = subprocess.run([sys.executable, "-c", prog, json.dumps(spec)], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])), timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_confined_process_reads_and_writes_only_what_it_is_given(tmp_path):
    model, work, elsewhere = tmp_path / "model", tmp_path / "work", tmp_path / "elsewhere"
    for d in (model, work, elsewhere):
        d.mkdir()
    (model / "m.bin").write_text("weights")
    (elsewhere / "secret.txt").write_text("secret")
    out = _confined(tmp_path, f"""
        attempt("model", lambda: open({str(model / 'm.bin')!r}).read())
        attempt("secret", lambda: open({str(elsewhere / 'secret.txt')!r}).read())
        attempt("passwd", lambda: open("/etc/passwd").read()[:4])
        attempt("work", lambda: open({str(work / 'out.txt')!r}, "w").write("ok"))
        attempt("outside", lambda: open({str(elsewhere / 'planted.txt')!r}, "w").write("x"))
        attempt("model_write", lambda: open({str(model / 'm.bin')!r}, "a").write("x"))
        attempt("tmp", lambda: open("/tmp/portability-sandbox-probe", "w").write("x"))
        import numpy
        out["numpy"] = float(numpy.ones(3).sum())
    """, read=(str(model),), write=(str(work),))
    assert out["why"] is None
    assert out["model"] == "weights" and out["work"] == 2 and out["numpy"] == 3.0
    for k in ("secret", "passwd", "outside", "model_write", "tmp"):
        assert str(out[k]).startswith("denied"), (k, out[k])
    assert not (elsewhere / "planted.txt").exists() and not Path("/tmp/portability-sandbox-probe").exists()


def test_a_confined_process_has_no_network_but_the_ports_it_is_given(tmp_path):
    with socket.socket() as srv, socket.socket() as other:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        other.bind(("127.0.0.1", 0))
        other.listen(4)
        port, other_port = srv.getsockname()[1], other.getsockname()[1]
        code = f"""
            import socket
            attempt("given", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=5).close() or "ok")
            attempt("other", lambda: socket.create_connection(("127.0.0.1", {other_port}), timeout=5).close() or "ok")
        """
        out = _confined(tmp_path, code)  # no port given: a network of its own, or no TCP at all
        assert str(out["given"]).startswith("denied") or "refused" in str(out["given"]).lower(), out
        assert out["other"] != "ok"
        if sandbox.landlock_abi() >= 4:
            out = _confined(tmp_path, code, connect_ports=(port,))
            assert out["given"] == "ok" and str(out["other"]).startswith("denied"), out


def test_the_check_runs_sandboxed_and_says_so_nowhere_when_it_is(tmp_path):
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--targets", "server/ort-cpu,server/tf", "--sandbox", "require",
                "--json", str(tmp_path / "r.json"))
    assert p.returncode == 0, p.stderr
    assert "not sandboxed" not in p.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert by_id(report)["server/tf"]["status"] == "pass"
    assert "Landlock" in report["environment"]["sandbox"]


def test_a_bad_sandbox_mode_is_a_usage_error():
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--sandbox", "sometimes")
    assert p.returncode == 2 and "--sandbox must be one of auto, require, off" in p.stderr, p.stderr


def test_a_symlinked_model_is_refused_without_following_it(tmp_path):
    link = tmp_path / "model.onnx"
    link.symlink_to(FIXTURES / "lenet.onnx")
    p = run_cli("check", str(link), "--targets", "server")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "symbolic link" in lines[0] and "refused" in lines[0] and "fixtures" not in lines[0], lines[0]


def _file_thief(folder: Path, secret: Path, loot: Path) -> None:
    """A SavedModel whose serving function reads ``secret`` and writes it to ``loot`` (both outside its folder)."""
    import tensorflow as tf

    class Thief(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
        def serve(self, x):
            data = tf.io.read_file(str(secret))
            with tf.control_dependencies([tf.io.write_file(str(loot), data)]):
                return {"y": x * 2.0 + tf.cast(tf.strings.length(data), tf.float32)}

    m = Thief()
    tf.saved_model.save(m, str(folder), signatures={"serving_default": m.serve})


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_the_sandbox_alone_stops_a_file_read_and_write_outside_the_folder(tmp_path, mode):
    pytest.importorskip("tensorflow")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    secret, loot = elsewhere / "secret.txt", elsewhere / "loot.txt"
    secret.write_text("the secret")
    _file_thief(tmp_path / "thief", secret, loot)
    out = tmp_path / "r.json"
    p = run_cli("check", str(tmp_path / "thief"), "--targets", "server", "--sandbox", mode, "--json", str(out),
                env=NO_ALLOWLISTS)
    report = json.loads(out.read_text())
    ref = report["targets"][0]
    assert "allow-lists off by PORTABILITY_DEBUG_NO_ALLOWLISTS" in " ".join(p.stderr.split()), p.stderr
    assert report["environment"]["sandbox"].endswith("; allow-lists off by PORTABILITY_DEBUG_NO_ALLOWLISTS")
    if mode == "off":  # the control: without allow-lists or sandbox the model steals the file
        assert loot.read_text() == "the secret", p.stderr
        return
    assert p.returncode == 1, p.stderr
    assert report["environment"]["sandbox"].startswith("Landlock ABI ")
    assert not loot.exists()
    assert ref["status"] in ("run-error", "load-error") and "Permission denied" in ref["error"], ref


def test_without_landlock_the_check_says_so_once_and_require_refuses(tmp_path):
    no = {"PORTABILITY_DEBUG_NO_LANDLOCK": "1"}
    out = tmp_path / "r.json"
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--targets", "server/ort-cpu,server/ort-cpu-noopt",
                "--sandbox", "auto", "--json", str(out), env=no)
    assert p.returncode == 0, p.stderr
    said = " ".join(p.stderr.split())  # as the console wrapped it
    assert said.count("not sandboxed") == 1 and "Landlock off by PORTABILITY_DEBUG_NO_LANDLOCK" in said, p.stderr
    assert json.loads(out.read_text())["environment"]["sandbox"] == (
        "none: Landlock off by PORTABILITY_DEBUG_NO_LANDLOCK: models are checked with the allow-lists alone")
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--targets", "server", "--sandbox", "require", env=no)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "--sandbox require" in lines[0], p.stderr


@pytest.mark.parametrize("switches, require", [
    (("PORTABILITY_DEBUG_NO_LANDLOCK",), ("--sandbox", "require")),
    (("PORTABILITY_DEBUG_NO_ALLOWLISTS",), ("--sandbox", "require")),
    (("PORTABILITY_DEBUG_NO_LANDLOCK", "PORTABILITY_DEBUG_NO_ALLOWLISTS"), ()),  # $PORTABILITY_SANDBOX=require
], ids=["landlock", "allow-lists", "both-by-env"])
def test_require_refuses_a_debug_switch_naming_it(switches, require):
    """A debug switch turns half of the sandbox off, so that the sandbox's tests can show the other half
    alone: ``--sandbox require`` (or ``$PORTABILITY_SANDBOX=require``) refuses to run under any, naming each."""
    env = dict.fromkeys(switches, "1")
    if not require:
        env["PORTABILITY_SANDBOX"] = "require"
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--targets", "server/ort-cpu", *require, env=env)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("error: --sandbox require: ") and all(f"off by {s}" in lines[0] for s in switches), lines[0]
    assert "the kernel" not in lines[0], lines[0]


def test_a_process_entering_a_required_sandbox_refuses_a_debug_switch():
    """The launcher every sandboxed process starts through: under ``require`` and a debug switch it stops (70)
    before it runs anything, whoever asked for the sandbox (the check, the API, a study)."""
    p = subprocess.run([sys.executable, "-m", "portability.core.sandbox", json.dumps({"mode": "require"}),
                        sys.executable, "-c", "print('ran')"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env=dict(os.environ, **NO_ALLOWLISTS,
                                PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])))
    assert p.returncode == 70 and "ran" not in p.stdout, (p.stdout, p.stderr)
    assert "allow-lists off by PORTABILITY_DEBUG_NO_ALLOWLISTS" in p.stderr, p.stderr


def test_with_both_switches_the_report_names_what_was_off(tmp_path):
    """Under auto, both switches run the check with neither half: the warning and the report's sandbox say
    which switch turned off what, not that the kernel has no Landlock."""
    out = tmp_path / "r.json"
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--targets", "server/ort-cpu", "--sandbox", "auto",
                "--json", str(out), env={"PORTABILITY_DEBUG_NO_LANDLOCK": "1", **NO_ALLOWLISTS})
    assert p.returncode == 0, p.stderr
    off = "Landlock off by PORTABILITY_DEBUG_NO_LANDLOCK; allow-lists off by PORTABILITY_DEBUG_NO_ALLOWLISTS"
    said = " ".join(p.stderr.split())  # as the console wrapped it
    assert said.count(f"warning: not sandboxed: {off}") == 1, p.stderr
    assert "the kernel" not in said and "allow-lists alone" not in said, p.stderr
    assert json.loads(out.read_text())["environment"]["sandbox"] == (
        f"none: {off}: models are loaded neither vetted nor confined")


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_the_sandbox_alone_contains_code_a_torch_archive_runs(tmp_path, mode):
    """A .pt2 whose legacy pickled weights run code (copy a secret file next to it): with the allow-lists
    off, torch's own loader unpickles it in the sandboxed loader, where the read and the write both fail."""
    pytest.importorskip("torch")
    import torch

    import hostile_pt2 as H

    elsewhere, folder = tmp_path / "elsewhere", tmp_path / "model"
    elsewhere.mkdir()
    folder.mkdir()
    secret, loot = elsewhere / "secret.txt", elsewhere / "loot.txt"
    secret.write_text("the secret")
    ep = torch.export.export(torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    root, files = H.entries(ep)
    files["data/weights/model.pt"] = H.hostile_torch_save(
        dict(ep.state_dict), f"open({str(loot)!r}, 'w').write(open({str(secret)!r}).read())")
    H.write(folder / "model.pt2", root, files)
    run_cli("check", str(folder / "model.pt2"), "--targets", "server/torch", "--sandbox", mode, env=NO_ALLOWLISTS)
    if mode == "off":  # the control: without allow-lists or sandbox the archive's code copies the file
        assert loot.read_text() == "the secret"
    else:
        assert not loot.exists()


def test_a_gpu_device_stays_open_to_a_narrowed_worker_and_its_threads_may_name_themselves(tmp_path):
    """What CUDA needs from a confined worker (``server/ort-cuda``), each a fallback to the CPU on a real GPU
    before: its device files in the second layer too (a confined process cannot list ``/dev`` to find them
    again: "no CUDA-capable device"), and its own threads' files in ``/proc`` to write ("OS call failed",
    error 304, at ``cudaSetDevice``). A pseudo-terminal stands in for the GPU: a character device found by a
    pattern, open for reading and writing."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir(), cache.mkdir()
    prog = textwrap.dedent("""
        import json, os, sys, threading
        from portability.core import sandbox as S
        S._GPU_DEVICE_GLOBS = ("/dev/ptm?",)
        sb = S.Sandbox(mode="require", write=(sys.argv[1],), write_until_narrowed=(sys.argv[2],))
        out = {"why": S.enter(sb)}
        S.narrow(sb)
        def attempt(name, fn):
            try:
                out[name] = fn()
            except OSError as e:
                out[name] = f"denied: {e.strerror}"
        attempt("device", lambda: os.close(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)) or "opened")
        attempt("other_device", lambda: os.close(os.open("/dev/kmsg", os.O_RDONLY)) or "opened")
        def name():  # what a runtime does for its worker threads: pthread_setname_np writes comm
            with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
                f.write("gpu-worker")
            return open(f"/proc/self/task/{threading.get_native_id()}/comm").read().strip()
        t = threading.Thread(target=lambda: attempt("thread_name", name)); t.start(); t.join()
        attempt("other_process", lambda: open("/proc/1/comm", "w").write("x"))
        print(json.dumps(out))
    """)
    p = subprocess.run([sys.executable, "-c", prog, str(work), str(cache)], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])),
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["why"] is None
    assert out["device"] == "opened" and out["thread_name"] == "gpu-worker", out
    assert str(out["other_device"]).startswith("denied") and str(out["other_process"]).startswith("denied"), out


def test_a_sandboxed_process_does_not_read_the_folder_it_was_started_from(tmp_path):
    """``python -m`` puts the folder a process starts in first on ``sys.path``: neither the launcher nor the
    folders it allows may take it from there (a check started from the user's home)."""
    from portability.core.sandbox import Sandbox, command, status

    if not status()[0]:
        pytest.skip(f"no OS sandbox here: {status()[1]}")
    (tmp_path / "secret.txt").write_text("the owner's secret")
    (tmp_path / "w").mkdir()
    out = subprocess.run(command(Sandbox(mode="require", write=(str(tmp_path / "w"),)), ["cat", "secret.txt"]),
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "the owner's secret" not in out.stdout
    assert "Permission denied" in out.stderr
