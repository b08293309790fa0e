"""``portability serve``: the resident session that keeps the browsers and the ARM64 emulator running
between checks (``portability.resident``)."""
from __future__ import annotations

import json
import os
import signal
import time

import typer

from portability.resident import client


def serve(
    stop: bool = typer.Option(False, "--stop", help="Stop the resident session (its browsers and emulator with it)."),
    status: bool = typer.Option(False, "--status", help="Say whether it runs, since when, and what it serves."),
    idle: float = typer.Option(client.IDLE_S, "--idle", min=1.0,
                               help="Seconds without a check after which it stops by itself (default {:g}).".format(client.IDLE_S)),
    foreground: bool = typer.Option(False, "--foreground", help="Run it in this process (Ctrl-C stops it)."),
    as_json: bool = typer.Option(False, "--json", help="--status as JSON."),
) -> int:
    """Start the resident session in the background (if it is not running) and say where it is.

    Checks lease its headless Chromium and emulated ARM64 interpreter instead of starting their own: the
    start-up is paid once per machine, not once per check. The first check starts it by itself
    (PORTABILITY_RESIDENT=off, or --resident off, turns that off); it stops after --idle seconds without a
    check, or with --stop. Only this user can reach it (a Unix socket in a folder of mode 0700)."""
    path = client.socket_path()
    if stop:
        try:
            answer = client.request("stop", path)
        except client.Unreachable:
            typer.echo(f"no resident session runs ({path})")
            return 0
        _wait_gone(int(answer.get("pid") or 0))
        typer.echo(f"stopped the resident session (pid {answer.get('pid')})")
        return 0
    if status:
        try:
            info = client.request("status", path)
        except client.Unreachable:
            typer.echo(json.dumps({"running": False, "socket": str(path)}) if as_json else f"no resident session runs ({path})")
            return 1
        typer.echo(json.dumps({"running": True, **info}) if as_json else _describe(info))
        return 0
    if foreground:
        from portability.resident.server import main

        main(["--socket", str(path), "--idle", str(idle)])
        return 0
    info = client.start(path, idle)
    typer.echo(_describe(info))
    return 0


def _describe(info: dict) -> str:
    services = ", ".join(f"{s['provider'].rpartition(':')[2]} (sandbox {s['mode']}, started {s['launches']}×)"
                         for s in info.get("services", []) if s["mode"] != "pool") or "nothing started yet"
    pools = ", ".join(f"{p['flavour']} (pid {p['pid']})" for p in info.get("worker_pools", [])) or "none yet"
    up = time.time() - float(info.get("since") or time.time())
    return (f"resident session pid {info['pid']} at {info['socket']}, up {up:.0f} s, {info.get('leases', 0)} "
            f"lease(s) held, {info.get('served', 0)} served; services: {services}; worker pools: {pools}; "
            f"{info.get('pool_leases', 0)} check(s) forking from them; stops after {info.get('idle_s', 0):g} s idle")


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
