"""Parent side of a worker: start it, watch its phases, time and memory, and always come back with a
result dict — also when the worker hangs (``timeout``), dies by a signal or is killed for memory
(``crashed``)."""
from __future__ import annotations

import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)


#: how long a worker may take to exit after reporting its result
EXIT_GRACE_S = 15.0


@dataclass(frozen=True)
class Limits:
    convert_timeout_s: float = 900.0
    run_timeout_s: float = 300.0
    memory_mb: float | None = None


def _tree(pid: int):
    import psutil

    try:
        p = psutil.Process(pid)
        return [p] + p.children(recursive=True)
    except psutil.Error:
        return []


def _rss_mb(procs) -> float:
    import psutil

    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def _kill_procs(procs) -> None:
    import psutil

    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def _kill_tree(proc: subprocess.Popen) -> None:
    procs = _tree(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _kill_procs(procs)  # anything that left the process group (browsers can)
    proc.wait()


def log_tail(path: Path, n: int = 12) -> list[str]:
    """The last non-empty lines of a worker's log."""
    try:
        return [ln.rstrip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()][-n:]
    except OSError:
        return []


def _said(log_file: Path) -> str:
    tail = log_tail(log_file, 3)
    return (": " + " | ".join(ln.strip() for ln in tail)) if tail else ""


#: live workers, so that an interrupted run can stop them all (they run in sessions of their own)
_LIVE: set[subprocess.Popen] = set()


def kill_all() -> None:
    for proc in list(_LIVE):
        _kill_tree(proc)


def run_worker(job: dict, workdir: Path, limits: Limits, on_phase: Callable[[str], None] | None = None) -> dict:
    """Run one job in a fresh worker process; the dict it returns always has ``status``."""
    workdir.mkdir(parents=True, exist_ok=True)
    job = dict(job, result=str(workdir / "result.json"), outputs=str(workdir / "outputs.npz"))
    job_file = workdir / "job.json"
    job_file.write_text(json.dumps(job))
    log_file = workdir / "worker.log"
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")  # console tools of this environment (onnxsim...)
    # the worker imports the same portability as this process, whatever is installed elsewhere
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with open(log_file, "wb") as errf:
        proc = subprocess.Popen([sys.executable, "-m", "portability.core.worker", str(job_file)],
                                stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env, cwd=workdir)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    phase = "start"
    started = time.monotonic()
    phase_started = started
    run_started: float | None = None
    peak = 0.0
    outcome: dict | None = None
    done_at: float | None = None
    procs: list = []
    _LIVE.add(proc)
    try:
        while True:
            for _key, _ in sel.select(timeout=0.2):
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    sel.unregister(proc.stdout)
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    if ev.get("phase") == "done":
                        done_at = time.monotonic()
                    elif ev.get("phase") and ev["phase"] != phase:
                        phase, phase_started = ev["phase"], time.monotonic()
                        if phase in ("load", "infer", "time") and run_started is None:
                            run_started = phase_started
                        if on_phase:
                            on_phase(phase)
            now = time.monotonic()
            procs = _tree(proc.pid) or procs
            peak = max(peak, _rss_mb(procs))
            if proc.poll() is not None:
                break
            if done_at is not None and now - done_at > EXIT_GRACE_S:
                _kill_tree(proc)  # its result is written; it only failed to exit (a stuck atexit, a thread)
                break
            if limits.memory_mb and peak > limits.memory_mb:
                _kill_tree(proc)
                outcome = {"status": "crashed", "error": f"killed: used {peak:.0f} MB of memory in phase '{phase}', over the {limits.memory_mb:.0f} MB limit"}
                break
            if done_at is None and phase in ("start", "convert") and now - started > limits.convert_timeout_s:
                _kill_tree(proc)
                outcome = {"status": "timeout", "error": f"conversion took longer than {limits.convert_timeout_s:g} s (killed after {now - started:.0f} s)"}
                break
            if done_at is None and run_started is not None and now - run_started > limits.run_timeout_s:
                _kill_tree(proc)
                outcome = {"status": "timeout", "error": f"no result within {limits.run_timeout_s:g} s of loading (stuck in phase '{phase}', killed)"}
                break
    except KeyboardInterrupt:
        _kill_tree(proc)
        raise
    finally:
        sel.close()
        proc.stdout.close()
        if proc.poll() is None:
            _kill_tree(proc)
        else:  # the worker is gone; make sure nothing it started lingers (a browser, an emulator)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _kill_procs([p for p in procs if p.pid != proc.pid])
        _LIVE.discard(proc)
    if outcome is None:
        result_file = Path(job["result"])
        if result_file.is_file():
            outcome = json.loads(result_file.read_text())
        elif proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            outcome = {"status": "crashed", "error": f"worker died by signal {name} in phase '{phase}'" + _said(log_file)}
        else:
            outcome = {"status": "crashed", "error": f"worker exited with code {proc.returncode} in phase '{phase}' without a result" + _said(log_file)}
        if proc.returncode and proc.returncode < 0 and outcome.get("status") == "crashed" and -proc.returncode == signal.SIGKILL:
            outcome["error"] += " (SIGKILL: often the kernel's out-of-memory killer)"
    outcome["peak_rss_mb"] = round(max(peak, outcome.get("peak_rss_mb") or 0.0), 1)
    outcome["wall_s"] = round(time.monotonic() - started, 3)
    outcome["log"] = str(log_file)
    return outcome
