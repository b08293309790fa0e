"""``audit --executor ray``: the audit's per-model work units on a Ray cluster.

Each Ray worker is an actor holding a session of its own (``engine/session.py``): its own browsers,
emulator and warm worker pool, started once on its node and reused for every model it is given; it
checks one model at a time exactly as the local executor does (``audit.unit.check_one``) and answers
its ``ModelResult`` as JSON text (``to_dict``), read back with ``from_dict``, so that the driver gets the
same result whichever executor ran the model. The driver
hands each free actor the next model, writes every entry to the audit's state as it arrives (a killed
audit resumes the same way) and stops the actors at the end.

Without ``address`` a local Ray instance is started for the audit and stopped after it; with one
(``ray://`` or ``HOST:PORT``, or ``auto``) the audit joins that cluster. The models must be readable at
the same paths on every node (a shared file system): an actor that cannot read its model reports that
model as a ``load-error``, as a missing model is; a model whose actor died is ``crashed``. The
``PORTABILITY_*`` variables of the driver travel with the work (``runtime_env``), so every node checks
under the same sandbox and runtime rules.
"""
from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Callable

from portability.core.availability import install
from portability.core.errors import UsageError
from portability.core.status import Status

if TYPE_CHECKING:
    from portability.audit.unit import ModelResult

log = logging.getLogger(__name__)


class Auditor:
    """A Ray actor: one session, then ``check`` per model until ``close``."""

    def __init__(self, mode: str, reads: tuple[str, ...]):
        from portability.engine.session import Session

        self.session = Session(mode, reads)

    def check(self, item, base: dict, flags: dict) -> str:
        from portability.audit.unit import check_one

        return json.dumps(check_one(item, base, flags, self.session).to_dict(), default=str)

    def node(self) -> str:
        import socket

        return f"{socket.gethostname()}:{os.getpid()}"

    def close(self) -> None:
        self.session.close()


def _reachable(address: str) -> str | None:
    """Why a ``HOST:PORT`` address takes no connection (None when it does, or for ``auto`` and ``ray://``):
    Ray itself would keep retrying for minutes."""
    import socket

    host, _, port = address.rpartition(":")
    if address == "auto" or "://" in address or not port.isdigit():
        return None
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def _init(address: str | None, workers: int):
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray ({install('ray')}): it is not installed") from None
    if ray.is_initialized():
        return ray, False
    env = {k: v for k, v in os.environ.items() if k.startswith("PORTABILITY_")}
    kw = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR, configure_logging=True,
              runtime_env={"env_vars": env} if env else None)
    why = _reachable(address) if address else None
    if why:
        raise UsageError(f"--executor ray: could not start or join the Ray cluster at {address}: {why}")
    try:
        if address:
            ray.init(address=address, **kw)
        else:
            ray.init(num_cpus=max(workers, os.cpu_count() or 1), **kw)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise UsageError(f"--executor ray: could not start or join {where}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return ray, True


def run_ray(pending: list, base: dict, flags: dict, mode: str, reads: tuple[str, ...],
            started: Callable[[int], None], finished: Callable[[int, "ModelResult"], None], address: str | None = None,
            workers: int = 1) -> None:
    """Check the ``pending`` ``(index, item)`` pairs on ``workers`` Ray actors; ``started(i)`` as a model is
    handed out, ``finished(i, result)`` as its result arrives (in the order they finish)."""
    from portability.audit.unit import ModelResult

    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    ray, own = _init(address, workers)
    actor_cls = ray.remote(num_cpus=1, max_restarts=0)(Auditor)
    actors = [actor_cls.remote(mode, reads) for _ in range(min(workers, len(pending)))]
    todo = list(pending)
    running: dict = {}  # object ref -> (actor, index, item)
    try:
        def hand(actor) -> None:
            i, item = todo.pop(0)
            started(i)
            running[actor.check.remote(item, base, flags)] = (actor, i, item)

        for a in actors:
            if todo:
                hand(a)
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            ref = done[0]
            actor, i, item = running.pop(ref)
            try:
                entry = ModelResult.from_dict(json.loads(ray.get(ref)))
            except ray.exceptions.RayActorError as e:  # the actor died (its node went away): this model's end
                entry = ModelResult(str(item.path), Status.CRASHED, f"the Ray worker died: {str(e).splitlines()[0]}",
                                    name=item.name, op=item.op, versions=item.versions)
                actor = actor_cls.remote(mode, reads)
                actors.append(actor)
            except ray.exceptions.RayTaskError as e:
                entry = ModelResult(str(item.path), Status.RUN_ERROR, name=item.name, op=item.op, versions=item.versions,
                                    error=f"the Ray worker failed: {str(e.cause if e.cause else e).splitlines()[0]}")
            finished(i, entry)
            if todo:
                hand(actor)
    finally:
        try:
            ray.get([a.close.remote() for a in actors], timeout=120)
        except Exception as e:  # noqa: BLE001 - a dead actor has nothing left to close
            log.debug("closing the Ray actors: %s", e)
        for a in actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001
                pass
        if own:
            ray.shutdown()
