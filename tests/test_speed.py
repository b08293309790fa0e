"""A fast check: one shared browser per check, parallel targets whose timing runs alone, conversions
done once under a lock. Isolation stays whole: a page that hangs or crashes costs its target only, and
nothing (browser, worker) is left behind after a run, a timeout or a Ctrl-C."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, by_id, check_json

#: these tests are about the services a check starts, shares and stops itself
pytestmark = [pytest.mark.usefixtures("own_services")]

TEST_TARGETS = {"PORTABILITY_PLUGINS": "doubles"}


def _leftovers(marker: str) -> list[str]:
    """Browser and worker processes whose command line names ``marker`` (the run's temp folder)."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            cmd = " ".join(p.cmdline())
            if p.status() != psutil.STATUS_ZOMBIE and marker in cmd and (
                    "chromium" in cmd or "portability.workers.worker" in cmd or "portability-chromium" in cmd):
                out.append(f"{p.pid} {cmd[:120]}")
        except psutil.Error:
            continue
    return out


def _web_missing() -> str | None:
    from portability.runtimes.litert_js import LiteRtJs
    from portability.runtimes.ort_web import OrtWeb

    a = next((a for a in (c.availability() for c in (OrtWeb, LiteRtJs)) if not a.ok), None)
    return None if a is None else f"{a.reason} (fix: {a.hint})"


needs_browser = pytest.mark.skipif(_web_missing() is not None, reason=f"web stack missing: {_web_missing()}")


# -- the timing gate ---------------------------------------------------------------------------------------

def _admit_later(g, tid: str) -> threading.Event:
    admitted = threading.Event()
    threading.Thread(target=lambda: (g.admit(tid), admitted.set()), daemon=True).start()
    time.sleep(0.2)
    return admitted


def test_timing_gate_times_one_at_a_time_when_nothing_else_works():
    from portability.workers.schedule import TimingGate

    g = TimingGate(jobs=2, parked=8)
    g.admit("a")
    g.admit("b")
    g.ready("a")
    assert not g.try_start("a")  # b still works: a waits
    g.ready("b")
    assert not g.try_start("b") and g.try_start("a")  # first ready, first timed
    assert not g.try_start("b")  # one at a time
    admitted = _admit_later(g, "c")
    assert not admitted.is_set()  # no new target starts while others time
    g.finished("a")
    assert g.try_start("b")
    g.finished("b")
    assert admitted.wait(5)


def test_a_parked_worker_frees_its_slot_and_times_when_nothing_is_left_to_start():
    from portability.workers.schedule import TimingGate

    g = TimingGate(jobs=1, parked=8)
    g.admit("a")
    admitted = _admit_later(g, "b")
    assert not admitted.is_set()  # one job: b waits for a's work
    g.ready("a")  # a is loaded and parks: its slot goes to b
    assert admitted.wait(5)
    assert not g.try_start("a")  # b works
    g.ready("b")
    assert not g.wait_start("b", 0.05) and g.wait_start("a", 1)  # nothing left to start: a times first
    g.finished("a")
    assert g.try_start("b")


def test_parked_workers_time_before_more_targets_start_when_too_many_wait():
    from portability.workers.schedule import TimingGate

    g = TimingGate(jobs=1, parked=2)
    for tid in ("a", "b"):
        g.admit(tid)
        g.ready(tid)
    admitted = _admit_later(g, "c")
    assert not admitted.is_set()  # two parked: the limit
    assert g.try_start("a")  # c waits to start, yet the parked ones time now
    g.finished("a")
    assert not admitted.is_set()  # the parked ones drain first
    assert g.try_start("b")
    g.finished("b")
    assert admitted.wait(5)


def test_targets_start_in_the_order_asked_and_low_memory_drains_the_parked_first():
    from portability.workers.schedule import TimingGate

    low = threading.Event()
    g = TimingGate(jobs=1, parked=8, memory_low=low.is_set)
    g.admit("a")
    started: list[str] = []
    for n, tid in enumerate(("b", "c", "d"), 1):  # queued in this order, while a works
        threading.Thread(target=lambda t=tid: (g.admit(t), started.append(t)), daemon=True).start()
        _wait_until(lambda: len(g._unstarted) == n)
    low.set()  # memory runs low: the next target to start (b) is the last before a drain
    g.ready("a")
    _wait_until(lambda: started == ["b"])
    g.ready("b")
    assert g.try_start("a")  # parked ones time before c starts
    g.finished("a")
    assert g.try_start("b")
    low.clear()
    g.finished("b")
    _wait_until(lambda: started == ["b", "c"])


def _wait_until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cond()


def test_a_worker_waiting_for_a_conversion_gives_its_slot_back():
    from portability.workers.schedule import TimingGate

    g = TimingGate(jobs=1, parked=8)
    g.admit("a")
    admitted = _admit_later(g, "b")
    assert not admitted.is_set()
    g.blocked("a", True)  # a waits for b's conversion... which b can now run
    assert admitted.wait(5)
    g.blocked("a", False)  # the conversion is there: a works again at once, beside b
    g.ready("b")
    assert not g.try_start("b")  # a works: nobody times
    g.ready("a")
    assert g.try_start("b")


def test_targets_waiting_for_a_service_resume_in_the_order_they_were_admitted():
    from portability.workers.schedule import TimingGate

    g = TimingGate(jobs=1, parked=8)
    for tid in ("a", "b", "c"):  # each admitted, then waits for the shared service to start
        g.admit(tid)
        g.blocked(tid, True)
    g.admit("x")  # meanwhile x starts, and holds the only slot
    resumed: list[str] = []
    for tid in ("c", "a", "b"):  # the service is up: they ask for a slot again, in any order
        threading.Thread(target=lambda t=tid: (g.blocked(t, False, take_slot=True), resumed.append(t)),
                         daemon=True).start()
        _wait_until(lambda t=tid: t in g._resuming)
    late = _admit_later(g, "d")  # a target not started yet waits for all of them
    for n, tid in enumerate(("x", "a", "b"), 1):
        g.ready(tid)
        _wait_until(lambda n=n: resumed == ["a", "b", "c"][:n])
    assert not late.is_set()
    g.ready("c")
    assert late.wait(5)


def test_planned_targets_start_in_plan_order_and_a_group_works_one_at_a_time():
    from portability.workers.schedule import TimingGate

    g = TimingGate(jobs=2, parked=8)
    g.plan([("gpu1", "gpu"), ("gpu2", "gpu"), ("cpu1", None), ("gone", None), ("cpu2", None)])
    started: list[str] = []
    for tid in ("cpu2", "cpu1", "gpu2", "gpu1"):  # their threads ask in any order
        threading.Thread(target=lambda t=tid: (g.admit(t), started.append(t)), daemon=True).start()
    # gpu1 first; gpu2 is next in the plan but its group works: cpu1 goes beside gpu1
    _wait_until(lambda: started == ["gpu1", "cpu1"])
    g.ready("cpu1")
    time.sleep(0.2)
    assert started == ["gpu1", "cpu1"]  # gpu2 waits for gpu1; cpu2 waits for "gone" (planned, not there yet)
    g.withdraw("gone")  # skipped
    _wait_until(lambda: started == ["gpu1", "cpu1", "cpu2"])
    assert not g.try_start("cpu1")  # planned targets are still to start: nobody times
    g.ready("gpu1")
    _wait_until(lambda: started == ["gpu1", "cpu1", "cpu2", "gpu2"])
    g.ready("cpu2")
    g.ready("gpu2")
    assert g.try_start("cpu1")


def test_a_conversion_another_process_holds_is_awaited_and_announced(tmp_path):
    import fcntl

    from portability.converters.base import ConvertContext
    from portability.converters.onnx_snapshot import OnnxFromOnnx
    from portability.core.artifact import Artifact
    from portability.workers.cache import Cache, cache_key

    src = Artifact(path=FIXTURES / "mlp.onnx", format="onnx", sha256="abc")
    conv, ctx = OnnxFromOnnx(), ConvertContext()
    key = cache_key(src, conv, {}, ctx)
    lock_file = tmp_path / "artifacts" / key[:2] / f".{key}.lock"
    lock_file.parent.mkdir(parents=True)
    waits: list[bool] = []
    waiting = threading.Event()
    with open(lock_file, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another target converts
        t = threading.Thread(target=lambda: Cache(tmp_path).convert(
            conv, src, {}, ctx, on_wait=lambda w: (waits.append(w), waiting.set())))
        t.start()
        assert waiting.wait(30) and waits == [True]
    t.join(60)
    assert waits == [True, False]


def test_the_costliest_targets_start_first():
    from portability.core.target import load_class
    from portability.workers import schedule
    from portability.targets import expand

    targets = expand("server,web,mobile")
    order = [t.id for t in schedule.by_cost(targets, lambda t: load_class(t.runtime).facts(t.options).cost)]
    assert order.index("web/ort-webgpu") < order.index("web/ort-wasm") < order.index("server/ort-cpu-noopt")
    assert order.index("server/tf") < order.index("web/ort-wasm")  # importing TensorFlow


def test_conversion_runs_once_for_parallel_targets(tmp_path):
    """Two workers needing the same conversion at once: one converts, the other waits and reuses it."""
    from portability.converters.base import ConvertContext, Converter
    from portability.core.artifact import Artifact
    from portability.workers.cache import Cache

    calls = []

    class Slow(Converter):
        output_format = "onnx"

        def version(self):
            return "1"

        def convert(self, src, out_dir, options, ctx):
            calls.append(1)
            time.sleep(0.5)
            (out_dir / "model.onnx").write_bytes(src.path.read_bytes())
            return Artifact(path=out_dir / "model.onnx", format="onnx", sha256="")

    src = Artifact(path=FIXTURES / "mlp.onnx", format="onnx", sha256="abc")
    hits = []
    threads = [threading.Thread(target=lambda: hits.append(Cache(tmp_path).convert(Slow(), src, {}, ConvertContext())[1]))
               for _ in range(3)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert len(calls) == 1 and sorted(hits) == [False, True, True]


# -- the shared browser --------------------------------------------------------------------------------------

@pytest.mark.web
@needs_browser
def test_hung_and_crashed_pages_cost_their_targets_only(tmp_path, request):
    import shutil
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="pw-speed-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    r = check_json(tmp_path, FIXTURES / "mlp.onnx", "--targets", "test/web-hang,test/web-crash,web/ort-wasm,web/litert-js",
                   "--runs", "3", env={**TEST_TARGETS, "TMPDIR": str(scratch)}, expect_rc=1)
    t = by_id(r)
    assert t["test/web-hang"]["status"] == "timeout"
    assert t["test/web-crash"]["status"] == "run-error" and "crashed" in t["test/web-crash"]["error"]
    for ok in ("web/ort-wasm", "web/litert-js"):
        assert t[ok]["status"] == "pass", t[ok]["error"]
        assert t[ok]["details"]["shared_browser"] is True
    assert not _leftovers(str(scratch))
    assert not list(scratch.glob("portability-chromium-*")), "browser profile left behind"


@pytest.mark.web
@needs_browser
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_ctrl_c_or_a_kill_leaves_no_browser_or_worker(tmp_path, request, sig):
    import shutil
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="pw-sigint-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    env = {**__import__("os").environ, **TEST_TARGETS, "TMPDIR": str(scratch)}
    # --timeout: the hung page stays hung until the signal, however slowly a loaded machine starts the check
    p = subprocess.Popen([sys.executable, "-m", "portability", "check", str(FIXTURES / "mlp.onnx"), "--no-history",
                          "--targets", "test/web-hang,web/ort-wasm,web/tfjs-wasm", "--timeout", "300"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         # as from a terminal: a test process (a pytest-xdist worker) may ignore SIGINT, and its
                         # children would inherit that
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(scratch.glob("portability-chromium-*")):
        time.sleep(0.2)
    time.sleep(2)  # well inside the run: pages open, one of them hung
    p.send_signal(sig)  # a kill: no clean-up of its own, its services and workers notice it is gone
    out, err = p.communicate(timeout=60)
    assert p.returncode == (130 if sig == signal.SIGINT else -sig), err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (_leftovers(str(scratch)) or list(scratch.glob("portability-chromium-*"))):
        time.sleep(0.2)
    assert not _leftovers(str(scratch)), _leftovers(str(scratch))
    assert not list(scratch.glob("portability-chromium-*"))


def test_a_conversion_that_failed_fails_the_checks_other_targets_without_converting_again(tmp_path):
    """Ten targets start from one onnx2tf run: when it fails, it fails once, not ten times — within the
    one check only (another check converts again), and never for a timeout."""
    from portability.converters.base import ConvertContext, Converter
    from portability.core.artifact import Artifact
    from portability.core.errors import ConvertError
    from portability.workers.cache import Cache

    calls = []

    class Refuses(Converter):
        output_format = "onnx"

        def version(self):
            return "1"

        def convert(self, src, out_dir, options, ctx):
            calls.append(1)
            raise ConvertError("op TopK with a dynamic k is not supported", op="TopK")

    src = Artifact(path=FIXTURES / "mlp.onnx", format="onnx", sha256="abc")
    errors = []
    for scope in ("check-1", "check-1", "check-1", "check-2"):
        with pytest.raises(ConvertError) as e:
            Cache(tmp_path, scope=scope).convert(Refuses(), src, {}, ConvertContext())
        errors.append((str(e.value), e.value.op))
    assert len(calls) == 2  # once for check-1's three targets, once for check-2
    assert set(errors) == {("op TopK with a dynamic k is not supported", "TopK")}
    with pytest.raises(ConvertError):  # without a check's id nothing is remembered
        Cache(tmp_path).convert(Refuses(), src, {}, ConvertContext())
    assert len(calls) == 3
