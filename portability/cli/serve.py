"""``portability serve``: the resident session that keeps the browsers and the ARM64 emulator running
between checks (``portability.resident``)."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Optional

import typer

from portability.resident import client
from portability.resident.protocol import TRIM_S


def serve(
    stop: bool = typer.Option(False, "--stop", help="Stop the resident session (its browsers and emulator with it)."),
    status: bool = typer.Option(False, "--status", help="Say whether it runs, since when, and what it serves."),
    idle: float = typer.Option(client.IDLE_S, "--idle", min=1.0,
                               help="Seconds without a check after which it stops by itself (default {:g}).".format(client.IDLE_S)),
    trim: Optional[float] = typer.Option(None, "--trim", min=1.0,
                                         help="Seconds without a check after which it lets go of its worker pools and "
                                              "the browsers' kept pages, keeping the browsers and the emulator "
                                              "(default {:g}): most of its memory, quick to make again.".format(TRIM_S)),
    foreground: bool = typer.Option(False, "--foreground", help="Run it in this process (Ctrl-C stops it)."),
    as_json: bool = typer.Option(False, "--json", help="--status as JSON."),
) -> int:
    """Start the resident session in the background (if it is not running) and say where it is.

    Checks lease its headless Chromium and emulated ARM64 interpreter instead of starting their own: the
    start-up is paid once per machine, not once per check. The first check starts it by itself
    (PORTABILITY_RESIDENT=off, or --resident off, turns that off); it stops after --idle seconds without a
    check, or with --stop. Only this user can reach it (a Unix socket in a folder of mode 0700)."""
    from portability.core.errors import UsageError

    try:
        return _serve(stop, status, idle, foreground, as_json, trim)
    except client.Unreachable as e:  # none could start, or what would reach it is not this user's: exit 2
        raise UsageError(str(e)) from None


def _serve(stop: bool, status: bool, idle: float, foreground: bool, as_json: bool, trim: float | None = None) -> int:
    path = client.socket_path()
    if stop:
        answer = _ask("stop", path)
        if answer is None:
            typer.echo(f"no resident session runs ({path})")
            return 0
        _wait_gone(int(answer.get("pid") or 0))
        typer.echo(f"stopped the resident session (pid {answer.get('pid')})")
        return 0
    if status:
        info = _ask("status", path, memory=True)
        if info is None:
            typer.echo(json.dumps({"running": False, "socket": str(path)}) if as_json else f"no resident session runs ({path})")
            return 1
        if info.get("ok") is False:
            typer.echo(json.dumps({"running": True, **info}) if as_json else f"the resident session answered: {info.get('error')}")
            return 1
        typer.echo(json.dumps({"running": True, **info}) if as_json else _describe(info))
        return 0
    if foreground:
        return _foreground(path, idle, trim)
    info = client.start(path, idle, trim)
    typer.echo(_describe(info))
    return 0


def _ask(op: str, path: Path, **fields) -> dict | None:
    """The resident session's answer, None where none runs. Raises client.Refused."""
    try:
        return client.request(op, path, **fields)
    except client.Refused:
        raise
    except client.Unreachable:
        return None


def _foreground(path: Path, idle: float, trim: float | None = None) -> int:
    """The resident process in this one, its socket's folder made and checked first."""
    from portability.resident.server import main

    client.own_folder(path, make=True)
    try:
        main(["--socket", str(path), "--idle", str(idle), *(["--trim", str(trim)] if trim is not None else [])])
    except OSError as e:
        raise client.Unreachable(f"the resident session could not listen at {path} ({e.strerror or e})") from None
    return 0


def _describe(info: dict) -> str:
    services = ", ".join(f"{s['provider']} (sandbox {s['mode']}, started {s['launches']}×)"
                         for s in info.get("services", []) if s["mode"] != "pool") or "nothing started yet"
    pools = ", ".join(f"{p['flavour']} (pid {p['pid']})" for p in info.get("worker_pools", [])) or "none yet"
    up = time.time() - float(info.get("since") or time.time())
    return (f"resident session pid {info['pid']} at {info['socket']}, up {up:.0f} s, {info.get('leases', 0)} "
            f"lease(s) held, {info.get('served', 0)} served; services: {services}; worker pools: {pools}; "
            f"{info.get('pool_leases', 0)} check(s) forking from them; {_memory(info['memory_mb']) if 'memory_mb' in info else ''}"
            f"{_trim(info)}stops after {info.get('idle_s', 0):g} s idle")


def _trim(info: dict) -> str:
    done = info.get("trimmed")
    if done:
        return (f"idle: let go of {done['pools']} worker pool(s) and {done['pages']} kept page(s) "
                f"{time.time() - float(done['at']):.0f} s ago; ")
    return f"lets go of its worker pools and kept pages after {info['trim_s']:g} s idle; " if info.get("trim_s") else ""


def _memory(m: dict) -> str:
    if m.get("unique") is None:
        return "memory unknown; "
    return (f"memory {m['unique']:.0f} MB unique ({m['proportional']:.0f} MB proportional) in "
            f"{m['processes']} processes; ")


def _wait_gone(pid: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while pid and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
