"""Parent side of a worker: start it, watch its phases, time and memory, and always come back with a
:class:`WorkerResult` — also when the worker hangs (``timeout``), dies by a signal or is killed for memory
(``crashed``)."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable

from portability.core.protocol import Job, Phase, WorkerResult
from portability.core.child_env import worker_env  # noqa: F401  (the workers' environment)
from portability.core.status import Status
from portability.workers import worker_pool
from portability.core.limits import Limits
from portability.workers.schedule import NoGate
from portability.workers.tree import kill_procs, kill_tree, rss_mb, tree
from portability.workers.cache import conversion_pool, conversions_ahead

log = logging.getLogger(__name__)


#: how long a worker may take to exit after reporting its result
EXIT_GRACE_S = 15.0
#: a parked worker (loaded, waiting for its turn to time) is checked for life this often; its turn wakes it
#: at once
PARKED_POLL_S = 1.0
#: a working worker's memory and time limits are checked this often (its events wake the runner at once)
WORKING_POLL_S = 0.25


def log_tail(path: Path, n: int = 12) -> list[str]:
    """The last non-empty lines of a worker's log."""
    try:
        return [ln.rstrip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()][-n:]
    except OSError:
        return []


#: terminal colour codes, and log lines that never say why a process died (ONNX Runtime's telemetry client
#: warns on every start where it cannot write its device id: the sandbox refuses that write)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOISE = re.compile(r"telemetry", re.I)


def _said(log_file: Path) -> str:
    tail = [_ANSI.sub("", ln).strip() for ln in log_tail(log_file, 12)]
    tail = [ln for ln in tail if ln and not _NOISE.search(ln)][-3:]
    return (": " + " | ".join(tail)) if tail else ""


#: live workers, so that an interrupted run can stop them all (they run in sessions of their own)
_LIVE: set[subprocess.Popen] = set()


def kill_all() -> None:
    for proc in list(_LIVE):
        kill_tree(proc)
    worker_pool.shutdown()


def shutdown() -> None:
    """The end of a check: stop the pre-started worker pool (``workers/worker_pool.py``) if one runs."""
    worker_pool.shutdown()


def prestart(pool: str = "", resident: Path | bool = True, lasting: bool = False) -> None:
    """The start of a check: the worker pool (of that flavour: ``Runtime.pool``) starts in the background, in a
    worker's environment — the resident session's, leased (``resident``: its socket; True: the user's; False:
    none), else the check's own (``lasting``: kept for more checks, a session's)."""
    if not pool:  # the check's start: where its workers come from (a later flavour's start keeps it)
        from portability import sources

        sources.use_pool(run_module)  # the source's reader too
        if resident is True:
            from portability.resident import client

            try:
                resident = client.socket_path()
            except (client.Unreachable, OSError):
                resident = False
        worker_pool.use_resident(resident or None, lasting)
    worker_pool.prestart(worker_env(), flavour=pool)


def start_pools(jobs: list[Job]) -> dict[str, str]:
    """The worker pools these jobs' workers fork from start now, in the background: their runtimes' (``Job.pool``)
    and their conversions' still to make; one that two or more of them fork from is worth a zygote of its own even
    for one check (``worker_pool.worth``). Returns, by target id, why a job needs no worker: a conversion of its
    chain has nothing to do for the model, as the cache remembers (``cache.conversions_ahead``)."""
    pools: Counter = Counter()
    skips: dict[str, str] = {}
    for job in jobs:
        try:
            ahead, why = conversions_ahead(job)
        except Exception as e:  # noqa: BLE001 — its worker meets what is wrong (a converter, the feeds) and says so
            log.debug("%s: conversions not looked ahead (%s)", job.target.id, e)
            ahead, why = set(), None
        if why:
            skips[job.target.id] = why
        else:
            pools.update(p for p in {job.pool} | ahead if p)
    worker_pool.worth(p for p, n in pools.items() if n > 1)
    for pool in sorted(pools):
        prestart(pool)
    return skips


def run_module(argv: list[str], env: dict[str, str], cwd: Path, flavour: str, timeout_s: float):
    """A module's command line in a child of the worker pool (``worker_pool.run_module``), in ``env`` with a
    worker's interpreter path and portability (the pool's start-up environment); None where the pool cannot."""
    base = worker_env()
    return worker_pool.run_module(argv, dict(env, PATH=base["PATH"], PYTHONPATH=base["PYTHONPATH"]), cwd, flavour, timeout_s)


def _spawn(job_file: Path, log_file: Path) -> subprocess.Popen | worker_pool.PooledProcess:
    """The job's worker: forked from the pre-imported pool, else (pool off or unavailable) a fresh interpreter."""
    env = worker_env()
    doc = json.loads(job_file.read_text())
    job = doc["target"]
    env.update(job.get("env") or {})
    python = job.get("python")  # another environment's interpreter (a version of a package): never the pool's
    proc = None if python else worker_pool.spawn(job_file, log_file, env, doc.get("pool") or "")
    if proc is not None:
        return proc
    with open(log_file, "wb") as errf:
        return subprocess.Popen([python or sys.executable, "-m", "portability.workers.worker", str(job_file)],
                                stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.PIPE,
                                start_new_session=True, env=env, cwd=job_file.parent)


class _Watch:
    """Reads a worker's phase events and enforces its limits; ``failure`` is set when it was killed."""

    def __init__(self, proc: subprocess.Popen, limits: Limits, on_phase: Callable[[Phase], None] | None,
                 gate=None, tid: str = "", started: float | None = None):
        self.proc, self.limits, self.on_phase = proc, limits, on_phase
        self.gate, self.tid = gate or NoGate(), tid
        self.wait_started: float | None = None
        self.phases_s: dict[str, float] = {}
        self._phase_t0 = self.started = time.monotonic() if started is None else started
        self.phase = Phase.START
        self.run_started: float | None = None
        self.done_at: float | None = None
        self.peak = 0.0
        self.procs: list = []
        self.failure: WorkerResult | None = None
        self._buf = b""

    def _events(self, sel) -> None:
        # timing: wake seldom (one core in two here is the target's); parked: the gate's turn is awaited
        # below, the pipe only glanced at
        timeout = 0 if self.wait_started is not None else 1.0 if self.phase is Phase.TIME else WORKING_POLL_S
        if not sel.get_map():  # its output ended: its exit is what comes next, not more output
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
            return
        for _key, _ in sel.select(timeout=timeout):
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                sel.unregister(self.proc.stdout)
                return
            self._buf += chunk
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    phase = Phase(json.loads(line).get("phase"))
                except (ValueError, AttributeError):
                    continue
                if phase is Phase.DONE:
                    self._lap()
                    self.done_at = time.monotonic()
                elif phase is not self.phase:
                    self._enter(phase)

    def _enter(self, phase: Phase) -> None:
        """A new phase: account the last one's time, tell the gate what the worker now holds."""
        self._lap()
        previous, self.phase = self.phase, phase
        log.debug("%s: %s after %.2f s in %s", self.tid, phase.value, self.phases_s.get(previous.value, 0.0), previous.value)
        if phase.running and self.run_started is None:
            self.run_started = time.monotonic()
        if phase is Phase.BLOCKED or previous is Phase.BLOCKED:
            self.gate.blocked(self.tid, phase is Phase.BLOCKED)
        if phase is Phase.WAIT:
            self.wait_started = time.monotonic()
            self.gate.ready(self.tid)
        elif phase is Phase.CLOSE:
            self.gate.finished(self.tid)
        if self.on_phase:
            self.on_phase(phase)

    def _lap(self) -> None:
        now = time.monotonic()
        key = self.phase.value
        self.phases_s[key] = round(self.phases_s.get(key, 0.0) + now - self._phase_t0, 3)
        self._phase_t0 = now

    def _go_if_granted(self) -> None:
        """A worker waiting to time gets its go when the gate grants it; the wait is not its run time."""
        if self.wait_started is None or not self.gate.wait_start(self.tid, PARKED_POLL_S):
            return
        if self.run_started is not None:
            self.run_started += time.monotonic() - self.wait_started
        self.wait_started = None
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died meanwhile: the loop sees it

    def _over_limit(self, now: float) -> WorkerResult | None:
        lim, phase = self.limits, self.phase.value
        if lim.memory_mb and self.peak > lim.memory_mb:
            return WorkerResult.failed(Status.CRASHED, f"killed: used {self.peak:.0f} MB of memory in phase '{phase}', over the {lim.memory_mb:.0f} MB limit")
        if self.done_at is None and self.phase in (Phase.START, Phase.CONVERT, Phase.BLOCKED) and now - self.started > lim.convert_timeout_s:
            return WorkerResult.failed(Status.TIMEOUT, f"conversion took longer than {lim.convert_timeout_s:g} s (killed after {now - self.started:.0f} s)")
        if self.done_at is None and self.run_started is not None and self.wait_started is None \
                and now - self.run_started > lim.run_timeout_s:
            return WorkerResult.failed(Status.TIMEOUT, f"no result within {lim.run_timeout_s:g} s of loading (stuck in phase '{phase}', killed)")
        return None

    def _sampling(self) -> bool:
        """Whether to measure the worker's memory now: while it works. Parked or timing, its memory does not
        grow, and scanning the process table would disturb the target that times (one core in two here)."""
        return self.wait_started is None and self.phase is not Phase.TIME

    def loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                self._events(sel)
                self._go_if_granted()
                now = time.monotonic()
                if self._sampling():
                    self.procs = tree(self.proc.pid) or self.procs
                    self.peak = max(self.peak, rss_mb(self.procs))
                if self.proc.poll() is not None:
                    return
                if self.done_at is not None and now - self.done_at > EXIT_GRACE_S:
                    kill_tree(self.proc)  # its result is written; it only failed to exit (a stuck atexit, a thread)
                    return
                self.failure = self._over_limit(now)
                if self.failure is not None:
                    kill_tree(self.proc)
                    return
        finally:
            sel.close()

    def cleanup(self, finish: bool = True) -> None:
        proc = self.proc
        if finish:
            self.gate.finished(self.tid)
        proc.stdout.close()
        try:
            proc.stdin.close()
        except OSError:
            pass
        if proc.poll() is None:
            kill_tree(proc)
        else:  # the worker is gone; make sure nothing it started lingers (a browser, an emulator)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            kill_procs([p for p in self.procs if p.pid != proc.pid])


def _outcome(job: Job, proc: subprocess.Popen, phase: Phase, log_file: Path) -> WorkerResult:
    """The worker's own result, or what its death says."""
    result_file = Path(job.result)
    if result_file.is_file():
        return WorkerResult.from_dict(json.loads(result_file.read_text()))
    lost = getattr(proc, "lost", None)
    if lost:  # its zygote stopped, killing it: the resident session's (killed, or stopped), or the check's own
        return WorkerResult.failed(Status.CRASHED, f"{lost} stopped while this target ran, and its worker with it "
                                                   f"(in phase '{phase.value}'): run the check again")
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        error = f"worker died by signal {name} in phase '{phase.value}'" + _said(log_file)
        if -proc.returncode == signal.SIGKILL:
            error += " (SIGKILL: often the kernel's out-of-memory killer)"
        return WorkerResult.failed(Status.CRASHED, error)
    return WorkerResult.failed(Status.CRASHED, f"worker exited with code {proc.returncode} in phase '{phase.value}' without a result" + _said(log_file))


def run_worker(job: Job, workdir: Path, limits: Limits, on_phase: Callable[[Phase], None] | None = None,
               gate=None) -> WorkerResult:
    """Run one job in a fresh worker process; always returns a result (``timeout``/``crashed`` when the
    worker had to be killed or died). ``gate`` (``schedule.TimingGate``) decides when it may time."""
    workdir.mkdir(parents=True, exist_ok=True)
    job = job.at(workdir)
    if not job.pool and not job.target.python:  # a conversion to make that imports TensorFlow: forked after its import
        try:
            job = replace(job, pool=conversion_pool(job))
        except Exception as e:  # noqa: BLE001 — the worker meets what is wrong (a converter, the feeds) and says so
            log.debug("%s: no pool from its conversions (%s)", job.target.id, e)
    from portability.workers.worker_zygote import FLAVOUR_ENV, FLAVOURS

    if not job.target.python:  # another environment's interpreter is never a pool's
        job = replace(job, pools={f: f in FLAVOUR_ENV for f in FLAVOURS if worker_pool.serves(f)})
    t0 = time.monotonic()  # 'start' counts the spawn too (the first one may start the pool)
    made: tuple = ()  # the conversions of the workers before, that left a step to another pool's
    logs = b""  # and their logs
    phases: dict[str, float] = {}
    peak = 0.0
    for n in range(len(job.target.converters) + 1):
        result, watch = _attempt(job, workdir, limits, on_phase, gate, None if n else t0)
        made += result.conversions[len(made):]
        phases = {k: round(phases.get(k, 0.0) + watch.phases_s.get(k, 0.0), 3) for k in {**phases, **watch.phases_s}}
        peak = max(peak, watch.peak, result.peak_rss_mb or 0.0)
        if not result.again_in:
            break
        logs += _log_of(workdir / "worker.log", job.pool, result.again_in)
        job = replace(job, pool=result.again_in)
    else:
        result = WorkerResult.failed(Status.CONVERT_ERROR, "each worker left a conversion to another pool's")
    _before(workdir / "worker.log", logs)
    return replace(result, conversions=made, peak_rss_mb=round(peak, 1), wall_s=round(time.monotonic() - t0, 3),
                   log=str(workdir / "worker.log"), phases_s=phases)


def _log_of(log_file: Path, pool: str, to: str) -> bytes:
    """The log of a worker that left a step to a worker of the ``to`` pool (which writes ``log_file`` anew), headed."""
    try:
        text = log_file.read_bytes()
    except OSError:
        text = b""
    return f"--- a worker of the {pool or 'plain'} pool, which left a step to the {to} pool's ---\n".encode() + text


def _before(log_file: Path, earlier: bytes) -> None:
    """The logs of the workers before (``_log_of``) put before the last worker's, so that the job's log is whole."""
    if earlier:
        try:
            log_file.write_bytes(earlier + b"--- the worker that went on ---\n" + log_file.read_bytes())
        except OSError as e:
            log.debug("the earlier workers' logs are not kept: %s", e)


def _attempt(job: Job, workdir: Path, limits: Limits, on_phase, gate, t0: float | None) -> tuple[WorkerResult, "_Watch"]:
    """One worker for the job (``run_worker``): its result, and how it went. A worker that left a conversion to
    another pool's (``again_in``) keeps the target's place at the gate for the next one."""
    job_file = workdir / "job.json"
    job_file.write_text(json.dumps(job.to_dict()))
    Path(job.result).unlink(missing_ok=True)  # the worker before's
    log_file = workdir / "worker.log"
    proc = _spawn(job_file, log_file)
    watch = _Watch(proc, limits, on_phase, gate, job.target.id, started=t0)
    _LIVE.add(proc)
    result = None
    try:
        watch.loop()
        result = watch.failure or _outcome(job, proc, watch.phase, log_file)
    except KeyboardInterrupt:
        kill_tree(proc)
        raise
    finally:
        watch.cleanup(finish=result is None or not result.again_in)
        _LIVE.discard(proc)
    return result, watch
