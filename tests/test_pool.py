"""Workers forked from the pre-imported pool (``workers/worker_pool.py``): they report like fresh ones, die
like fresh ones, see their job's environment, and the pool never outlives its check or its parent."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import FIXTURES, ROOT

ECHO = "doubles:Echo"


@pytest.fixture
def pool(monkeypatch):
    from portability.workers import worker_pool

    monkeypatch.delenv(worker_pool.SWITCH, raising=False)
    worker_pool.shutdown()
    yield worker_pool
    worker_pool.shutdown()


def _job(tmp_path, runtime: str = ECHO):
    from portability.core.model import load_model
    from portability.core.protocol import Job, save_feeds
    from portability.settings.options import resolve
    from portability.core.inputs import prepare as prepare_feeds
    from portability.targets.base import Target

    model = load_model(FIXTURES / "mlp.onnx")
    feeds = prepare_feeds(model, resolve())
    names = tuple(i.name for i in model.inputs)
    save_feeds(feeds.arrays, tmp_path / "feeds.npz", names)
    return Job(target=Target(id="test/" + runtime.rsplit(":", 1)[1].lower(), runtime=runtime), source=model.artifact(),
               signature=model.signature(), feeds=str(tmp_path / "feeds.npz"), feeds_source=feeds.source,
               input_names=names, output_names=tuple(o.name for o in model.outputs), warmup=1, runs=2,
               use_cache=False)


def _run(tmp_path, job, name: str = "w"):
    from portability.core.limits import Limits
    from portability.workers.runner import run_worker

    return run_worker(job, tmp_path / name, Limits(convert_timeout_s=120, run_timeout_s=120))


def _fresh_blas_threads(env: dict | None = None) -> int | None:
    code = "import numpy\nfrom portability.workers.worker_zygote import blas_threads\nprint(blas_threads())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env=dict(os.environ, **(env or {})))
    return json.loads(out.stdout.strip().replace("None", "null"))


def test_a_pooled_worker_reports_its_result(tmp_path, pool):
    wr = _run(tmp_path, _job(tmp_path))
    assert wr.status == "ok", wr.error
    echo = wr.details["echo"]
    assert pool.pid() is not None and echo["ppid"] == pool.pid()  # forked by the zygote, not started by us
    assert echo["cwd"] == str(tmp_path / "w")
    assert echo["blas_threads"] == _fresh_blas_threads()  # OpenBLAS as a fresh interpreter sets it up
    assert len(wr.latency["samples"]) == 2 and wr.phases_s["start"] > 0
    zygote = psutil.Process(pool.pid())
    assert zygote.num_threads() == 1
    assert _run(tmp_path, _job(tmp_path), "w2").details["echo"]["ppid"] == zygote.pid  # one pool for many jobs


def test_a_tensorflow_worker_forks_from_the_zygote_that_imported_it(tmp_path, pool, monkeypatch):
    """A job of the ``tensorflow`` pool (``server/tf``'s) forks from a second zygote that imported TensorFlow once,
    with no thread started, where the pool serves more than one check (a session's; the resident session's); the
    other jobs still fork from the plain one, which never imports it; Keras is imported there too; a job whose
    environment changes what TensorFlow or Keras reads at import (``TF_*``, ``KERAS_*``) starts fresh. For one check alone, the plain zygote serves it."""
    from dataclasses import replace

    tf_job = replace(_job(tmp_path), pool="tensorflow")
    once = _run(tmp_path, tf_job, "once").details["echo"]
    assert once["ppid"] == pool.pid() and pool.pid("tensorflow") is None and once["tensorflow"] is False
    pool.use_resident(None, lasting=True)
    first = _run(tmp_path, tf_job, "tf1").details["echo"]
    assert pool.pid("tensorflow") is not None and first["ppid"] == pool.pid("tensorflow") != pool.pid()
    assert first["tensorflow"] is True  # imported before the fork: the worker's import costs nothing
    assert first["keras"] is True  # and Keras, which onnx2tf's run and the Keras readers import
    zygote = psutil.Process(pool.pid("tensorflow"))
    assert zygote.num_threads() == 1
    assert _run(tmp_path, tf_job, "tf2").details["echo"]["ppid"] == zygote.pid  # one for many jobs
    plain = _run(tmp_path, _job(tmp_path), "plain").details["echo"]
    assert plain["ppid"] == pool.pid() != zygote.pid and plain["tensorflow"] is False and plain["keras"] is False
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")  # read by Keras at its import: a fresh interpreter
    assert _run(tmp_path, tf_job, "keras").details["echo"]["ppid"] == os.getpid()
    monkeypatch.delenv("KERAS_BACKEND")
    # Keras's folder (a sandboxed process's own, empty): the same zygote, unless its keras.json says otherwise
    (tmp_path / "keras_home").mkdir()
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    assert _run(tmp_path, tf_job, "keras_home").details["echo"]["ppid"] == zygote.pid
    (tmp_path / "keras_home" / "keras.json").write_text('{"image_data_format": "channels_first"}')
    assert _run(tmp_path, tf_job, "keras_json").details["echo"]["ppid"] == os.getpid()
    monkeypatch.delenv("KERAS_HOME")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    fresh = _run(tmp_path, tf_job, "tf3").details["echo"]
    assert fresh["ppid"] == os.getpid() and fresh["tensorflow"] is False
    assert _run(tmp_path, _job(tmp_path), "plain2").details["echo"]["ppid"] == pool.pid()  # TF_* is no concern there


def test_a_conversion_that_imports_tensorflow_forks_from_its_pool_and_runs_its_tool_in_a_fork(tmp_path, pool):
    """A job whose conversion is not cached and imports TensorFlow (``Converter.pool``) forks from the TensorFlow
    zygote, and the Python tool the converter runs (``run_tool``, as onnx2tf's) runs in a fork of that worker,
    TensorFlow imported; once the conversion is cached, the same job forks from the plain zygote."""
    from dataclasses import replace

    from portability.targets.base import Target

    pool.use_resident(None, lasting=True)
    target = Target(id="test/echo", runtime=ECHO, converters=(("converter_doubles:CopyTf", {}),))
    job = replace(_job(tmp_path), target=target, use_cache=True, cache_dir=str(tmp_path / "cache"))
    first = _run(tmp_path, job, "first")
    assert first.status == "ok", first.error
    echo, meta = first.details["echo"], first.details["artifact_meta"]
    assert echo["ppid"] == pool.pid("tensorflow") != pool.pid() and echo["tensorflow"] is True
    tool = meta["tool"]
    assert tool["tensorflow"] is True and tool["ppid"] == meta["worker"]  # a fork of the worker, not a fresh interpreter
    assert tool["argv"][0] == "-c" and tool["argv"][2].endswith("model.onnx") and tool["cwd"] != echo["cwd"]
    assert first.conversions[0].cached is False
    second = _run(tmp_path, job, "second")
    assert second.status == "ok" and second.conversions[0].cached is True
    assert second.details["echo"]["ppid"] == pool.pid() and second.details["echo"]["tensorflow"] is False



def test_each_step_is_made_in_a_worker_of_its_pool_where_a_pool_sets_its_own_environment(tmp_path, pool):
    """The TF.js converter's pool (``tfjs``) imports TensorFlow with oneDNN's rewrites off, as the converter runs it:
    a job whose chain is a TensorFlow step and then such a step makes the first in a worker of the TensorFlow pool,
    which leaves the second to a worker of the ``tfjs`` pool; there the tool runs in a fork, not in a fresh
    interpreter. Both steps are in the result, as made; the job's phases add up. A worker of the ``tfjs`` pool never
    makes a TensorFlow step itself. For one check alone (the plain zygote serves every job), one worker makes both."""
    from dataclasses import replace

    from portability.targets.base import Target

    steps = (("converter_doubles:CopyTf", {}), ("converter_doubles:CopyTfjs", {}))
    job = replace(_job(tmp_path), target=Target(id="test/echo", runtime=ECHO, converters=steps), use_cache=True,
                  cache_dir=str(tmp_path / "cache_once"))
    once = _run(tmp_path, job, "once")
    assert once.status == "ok" and [c.cached for c in once.conversions] == [False, False]
    meta = once.details["artifact_meta"]
    assert meta["worker"] == meta["tfjs_worker"] and meta["worker_ppid"] == pool.pid()
    pool.use_resident(None, lasting=True)
    job = replace(job, cache_dir=str(tmp_path / "cache"))
    first = _run(tmp_path, job, "first")
    assert first.status == "ok", first.error
    assert [c.cached for c in first.conversions] == [False, False] and not first.again_in
    meta, echo = first.details["artifact_meta"], first.details["echo"]
    assert meta["tool"]["ppid"] == meta["worker"] and meta["tool"]["tensorflow"] is True
    assert meta["tool"]["argv"][0] == "-c" and meta["worker_ppid"] == pool.pid("tensorflow")
    tfjs = meta["tfjs_tool"]
    assert tfjs["ppid"] == meta["tfjs_worker"] and tfjs["tensorflow"] is True and tfjs["onednn"] == "0"  # forked
    assert meta["tfjs_worker_ppid"] == echo["ppid"] == pool.pid("tfjs") not in (pool.pid("tensorflow"), pool.pid())
    assert psutil.Process(pool.pid("tfjs")).num_threads() == 1
    assert first.phases_s["start"] > 0 and first.phases_s["convert"] > 0
    # the job's log is both workers', in the order they worked
    log_text = Path(first.log).read_text()
    tf_said, tfjs_said = f"CopyTf made its copy in worker {meta['worker']}", f"CopyTfjs made its copy in worker {meta['tfjs_worker']}"
    assert log_text.index("a worker of the tensorflow pool, which left a step to the tfjs pool's") < log_text.index(tf_said)
    assert log_text.index(tf_said) < log_text.index("the worker that went on") < log_text.index(tfjs_said)
    cached = _run(tmp_path, job, "cached")
    assert [c.cached for c in cached.conversions] == [True, True] and cached.details["echo"]["ppid"] == pool.pid()
    # a worker of the tfjs pool that would make a TensorFlow step leaves it to that pool's
    fresh = replace(job, pool="tfjs", cache_dir=str(tmp_path / "cache2"))
    again = _run(tmp_path, fresh, "tfjs_first")
    assert again.status == "ok", again.error
    assert [c.cached for c in again.conversions] == [False, False]
    made = again.details["artifact_meta"]
    assert made["worker_ppid"] == pool.pid("tensorflow") and made["tfjs_worker_ppid"] == pool.pid("tfjs")


def test_a_pool_two_workers_of_one_check_fork_from_is_started_for_that_check(tmp_path, pool):
    """For one check alone a TensorFlow worker forks from the plain zygote and imports TensorFlow itself; where two
    or more of the check's workers would fork from TensorFlow's (``start_pools``: their runtimes' pool, or that of a
    conversion still to make), that zygote is started for the check, and forgotten at its end."""
    from dataclasses import replace

    from portability.targets.base import Target
    from portability.workers.runner import start_pools

    tf_job = replace(_job(tmp_path), pool="tensorflow")
    start_pools([tf_job, _job(tmp_path)])
    assert _run(tmp_path, tf_job, "one").details["echo"]["ppid"] == pool.pid() and pool.pid("tensorflow") is None
    converting = replace(_job(tmp_path), use_cache=True, cache_dir=str(tmp_path / "cache"),
                         target=Target(id="test/echo", runtime=ECHO, converters=(("converter_doubles:CopyTf", {}),)))
    start_pools([tf_job, converting])
    echo = _run(tmp_path, tf_job, "two").details["echo"]
    assert pool.pid("tensorflow") is not None and echo["ppid"] == pool.pid("tensorflow") and echo["tensorflow"] is True
    assert _run(tmp_path, converting, "converting").conversions[0].cached is False
    pool.shutdown()
    start_pools([tf_job, converting, _job(tmp_path)])  # its conversion made: one worker of TensorFlow's pool
    assert _run(tmp_path, tf_job, "later").details["echo"]["ppid"] == pool.pid() and pool.pid("tensorflow") is None


def test_a_pytorch_worker_forks_from_the_zygote_that_imported_it(tmp_path, pool, monkeypatch):
    """The ``torch`` pool (a ``.pt2``'s reader, ``server/torch``, its exports): a third zygote imported PyTorch once,
    with no thread started, for a session's pool; a job that changes what PyTorch reads at import (``TORCH_*``)
    starts fresh. A conversion chain with a PyTorch step and a TensorFlow step left forks from TensorFlow's (the
    costlier import); with only PyTorch's left, from PyTorch's."""
    from dataclasses import replace

    from portability.targets.base import Target

    pool.use_resident(None, lasting=True)
    torch_job = replace(_job(tmp_path), pool="torch")
    first = _run(tmp_path, torch_job, "torch1").details["echo"]
    assert pool.pid("torch") is not None and first["ppid"] == pool.pid("torch") not in (pool.pid(), pool.pid("tensorflow"))
    assert first["torch"] is True and first["tensorflow"] is False
    assert psutil.Process(pool.pid("torch")).num_threads() == 1
    monkeypatch.setenv("TORCH_SHOW_CPP_STACKTRACES", "1")
    assert _run(tmp_path, torch_job, "torch2").details["echo"]["ppid"] == os.getpid()
    monkeypatch.delenv("TORCH_SHOW_CPP_STACKTRACES")
    both = Target(id="test/both", runtime=ECHO, converters=(("converter_doubles:CopyTorch", {}), ("converter_doubles:CopyTf", {})))
    job = replace(_job(tmp_path), target=both, use_cache=True, cache_dir=str(tmp_path / "cache"))
    wr = _run(tmp_path, job, "both")
    assert wr.status == "ok", wr.error
    assert wr.details["echo"]["ppid"] == pool.pid("tensorflow") and wr.details["artifact_meta"]["torch_before"] is False
    alone = Target(id="test/torch", runtime=ECHO, converters=(("converter_doubles:CopyTorch", {}),))
    wr = _run(tmp_path, replace(job, target=alone, cache_dir=str(tmp_path / "cache2")), "alone")
    assert wr.status == "ok", wr.error
    assert wr.details["echo"]["ppid"] == pool.pid("torch") and wr.details["artifact_meta"]["torch_before"] is True


_FORKED = """
import json, os, subprocess, sys, time
import tensorflow as tf
from portability.converters.base import run_tool
from portability.converters import forked
seen = 'import json, os, sys; print(json.dumps(["tensorflow" in sys.modules, os.getppid(), sys.argv, os.getcwd()]))'
out = {}
p = run_tool([sys.executable, "-c", seen + "; sys.exit(3)", "a b"], "seen", 30, cwd=sys.argv[1])
out["forked"] = [p.returncode, json.loads(p.stdout), os.getpid()]
p = run_tool([sys.executable, "-m", "tool_module", "x"], "module", 30, PYTHONPATH=sys.argv[2])
out["module"] = [p.returncode, p.stdout]
p = run_tool([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); raise ValueError('bad')"], "raise", 30)
out["raised"] = [p.returncode, p.stdout]
p = run_tool([sys.executable, "-c", seen], "oneDNN", 30, TF_ENABLE_ONEDNN_OPTS="0")
out["onednn"] = json.loads(p.stdout)[0]
t0 = time.monotonic()
try:
    run_tool([sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '61.2345'])"], "the sleeper", 2)
except Exception as e:
    out["timeout"] = [str(e), time.monotonic() - t0]
out["sleeping"] = subprocess.run(["pgrep", "-f", "^sleep 61.2345$"], capture_output=True, text=True).stdout
tf.constant(1.0) + 1  # TensorFlow's runtime started: its thread pools
out["started"] = [forked.why_not([sys.executable, "-c", seen], dict(os.environ)), json.loads(run_tool([sys.executable, "-c", seen], "seen", 30).stdout)[0]]
print(json.dumps(out))
"""


def test_a_python_tool_runs_in_a_fork_where_tensorflow_is_imported_and_fresh_where_it_would_differ(tmp_path):
    """``run_tool`` in a process that imported TensorFlow: a fork of it is the tool (its exit status, output, argv,
    folder, a PYTHONPATH module); past its time limit its process group is killed; a command that changes what
    TensorFlow read at its import (``TF_ENABLE_ONEDNN_OPTS``), or a process whose TensorFlow runtime started, gets
    a fresh interpreter."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "tool_module.py").write_text("import sys\nprint('module', __name__, sys.argv)\n")
    p = subprocess.run([sys.executable, "-c", _FORKED, str(tmp_path), str(tmp_path / "site")], capture_output=True,
                       text=True, cwd=ROOT, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    rc, (tf_seen, ppid, argv, cwd), me = out["forked"]
    assert rc == 3 and tf_seen is True and ppid == me and argv == ["-c", "a b"] and cwd == str(tmp_path)
    assert out["module"] == [0, f"module __main__ [{str(tmp_path / 'site' / 'tool_module.py')!r}, 'x']\n"]  # as -m sets it
    rc, text = out["raised"]
    assert rc == 1 and "out\nerr\n" in text and text.rstrip().endswith("ValueError: bad")
    assert out["onednn"] is False  # a fresh interpreter
    why, seconds = out["timeout"]
    assert "the sleeper did not finish within 2 s" in why and seconds < 10 and out["sleeping"] == ""
    assert out["started"][0] is not None and out["started"][1] is False  # its threads: a fresh interpreter


def test_a_module_runs_forked_from_the_pool_as_python_m_would_run_it(tmp_path, pool):
    """``runner.run_module`` (a source's reader): the module's main in a child of the zygote of the flavour asked
    for (TensorFlow's: imported already), in the folder given, its output, stderr and exit status as
    ``subprocess.run`` gives them; past its time limit it is killed."""
    from portability.workers.runner import run_module

    pool.use_resident(None, lasting=True)
    p = run_module(["echo_main", "7"], dict(os.environ), tmp_path, "tensorflow", 60)
    said = json.loads(p.stdout)
    assert p.returncode == 7 and p.stderr.strip().endswith("said on stderr")
    assert said["ppid"] == pool.pid("tensorflow") and said["tensorflow"] is True
    assert said["argv"] == ["7"] and said["cwd"] == str(tmp_path)
    plain = json.loads(run_module(["echo_main", "0"], dict(os.environ), tmp_path, "", 60).stdout)
    assert plain["ppid"] == pool.pid() and plain["tensorflow"] is False
    with pytest.raises(subprocess.TimeoutExpired):
        run_module(["echo_main", "sleep"], dict(os.environ), tmp_path, "", 2)
    time.sleep(0.5)  # the zygote reaps it
    assert not [c for c in psutil.Process(pool.pid()).children() if c.status() != psutil.STATUS_ZOMBIE]


def test_an_aborting_worker_is_crashed_with_sigabrt(tmp_path, pool):
    wr = _run(tmp_path, _job(tmp_path, "doubles:Abort"))
    assert pool.pid() is not None
    assert wr.status == "crashed" and "SIGABRT" in wr.error, wr.error
    assert _run(tmp_path, _job(tmp_path), "after").status == "ok"  # the pool lives on


def test_a_jobs_environment_reaches_its_worker(tmp_path, pool, monkeypatch):
    monkeypatch.setenv("PORTABILITY_ECHO_A", "1")
    first = _run(tmp_path, _job(tmp_path), "first").details["echo"]
    assert first["env"] == {"PORTABILITY_ECHO_A": "1"} and first["ppid"] == pool.pid()
    monkeypatch.setenv("PORTABILITY_ECHO_A", "2")
    monkeypatch.setenv("PORTABILITY_ECHO_B", "x")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")  # applied by the worker itself
    second = _run(tmp_path, _job(tmp_path), "second").details["echo"]
    assert second["env"] == {"PORTABILITY_ECHO_A": "2", "PORTABILITY_ECHO_B": "x"} and second["ppid"] == pool.pid()
    assert second["blas_threads"] == _fresh_blas_threads({"OPENBLAS_NUM_THREADS": "1"}) == 1
    # a variable read when an interpreter starts cannot change in a forked worker: that job starts fresh
    monkeypatch.setenv("PYTHONHASHSEED", "123")
    third = _run(tmp_path, _job(tmp_path), "third").details["echo"]
    assert third["ppid"] == os.getpid() and third["env"]["PORTABILITY_ECHO_B"] == "x"


def test_workers_start_fresh_when_the_pool_is_off_or_gone(tmp_path, pool, monkeypatch, caplog):
    monkeypatch.setenv(pool.SWITCH, "0")
    wr = _run(tmp_path, _job(tmp_path), "off")
    assert wr.status == "ok" and wr.details["echo"]["ppid"] == os.getpid() and pool.pid() is None
    monkeypatch.delenv(pool.SWITCH)
    assert _run(tmp_path, _job(tmp_path), "on").details["echo"]["ppid"] == pool.pid()
    zygote = psutil.Process(pool.pid())
    zygote.kill()
    zygote.wait(30)
    with caplog.at_level(logging.WARNING, logger="portability.workers.worker_pool"):
        wr = _run(tmp_path, _job(tmp_path), "gone")
    assert wr.status == "ok" and wr.details["echo"]["ppid"] == os.getpid()
    assert any("worker pool stopped" in r.getMessage() for r in caplog.records)


_PARENT = """
import sys, time
from pathlib import Path
from portability.workers import runner, worker_pool
proc = worker_pool.spawn(Path(sys.argv[1]), Path(sys.argv[2]), runner.worker_env())
print(worker_pool.pid(), proc.pid, flush=True)
proc.stdout.readline()  # the worker started
print("started", flush=True)
if sys.argv[3] == "shutdown":
    runner.shutdown()
    print(proc.wait(), flush=True)
else:
    time.sleep(600)
"""


def _hanging_worker(tmp_path, how: str) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """A parent process with a pool whose worker hangs; returns it and [the zygote, the worker]."""
    job = _job(tmp_path, "doubles:Hang").at(tmp_path / "hang")
    (tmp_path / "hang").mkdir()
    job_file = tmp_path / "hang" / "job.json"
    job_file.write_text(json.dumps(job.to_dict()))
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(job_file), str(tmp_path / "hang" / "log"), how],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])))
    zygote_pid, worker_pid = map(int, parent.stdout.readline().split())
    assert parent.stdout.readline().strip() == "started"
    procs = [psutil.Process(zygote_pid), psutil.Process(worker_pid)]
    assert procs[1].ppid() == zygote_pid and os.getsid(worker_pid) == worker_pid
    return parent, procs


def test_shutdown_stops_the_pool_and_its_workers(tmp_path, pool):
    parent, (zygote, worker) = _hanging_worker(tmp_path, "shutdown")
    assert int(parent.stdout.readline()) == -signal.SIGKILL  # the worker, killed as the pool stopped
    assert parent.wait(60) == 0
    assert not zygote.is_running() and not worker.is_running()


def test_the_pool_is_gone_when_its_parent_is_killed(tmp_path, pool):
    parent, (zygote, worker) = _hanging_worker(tmp_path, "sleep")
    parent.kill()
    parent.wait()
    gone, alive = psutil.wait_procs([zygote, worker], timeout=60)
    assert alive == []


def test_a_check_starts_its_pool_at_once_and_a_bad_model_leaves_none(tmp_path, pool):
    """The pool starts as the check starts (beside the model's reading), and a check refused before any
    target runs stops it, as one that ran does."""
    from portability.core.errors import UsageError
    from portability.engine.pipeline import check
    from portability.settings.options import resolve

    pool.prestart(dict(os.environ)).join(60)
    started = pool.pid()
    assert started is not None and psutil.pid_exists(started)
    pool.shutdown()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(UsageError):
        check(bad, resolve({"targets": "server/ort-cpu"}))
    assert pool.pid() is None


def test_the_resident_starts_the_tfjs_pool_for_a_check_that_asks_and_keeps_it_for_the_next_new_model(pool):
    """The resident session's pools (``ZygoteHost``) stay between checks, the TF.js converter's too; but warming
    (``serve``, the end of a check) leaves that one out: only a new model's conversions use it, and the check that
    has one to make starts it while its earlier steps run. All go when the session lets go of its pools."""
    from portability.workers.runner import worker_env
    from portability.workers.zygote_handle import ZygoteHost

    host, env = ZygoteHost(), worker_env()
    try:
        host.warm("tfjs", env)
        host.warm("", env)
        assert [p["flavour"] for p in host.pools()] == ["plain"]
        tfjs = host.zygote("tfjs", env)
        assert host.zygote("tfjs", env) is tfjs  # a second check forks from the same one
        assert tfjs.proc.poll() is None and {"flavour": "tfjs", "pid": tfjs.proc.pid} in host.pools()
    finally:
        host.close()
    assert tfjs.proc.wait(timeout=10) is not None and host.pools() == []
