"""A session: checks of several models in one process sharing what is costly to start — the shared services
(the browsers, the emulated ARM64 server) and the warm worker pool — started once, stopped at the end.

``check(..., session=s)`` uses the session's services instead of its own and leaves the pool running. The
services' sandbox reads every folder the session's models live in (``reads``), since one emulator serves
them all. With the resident session (the default) the services are its own, kept beyond this session.
"""
from __future__ import annotations

from portability.workers import Services


class Session:
    def __init__(self, mode: str = "auto", reads: tuple[str, ...] = (), resident: str | None = None):
        from portability.core.sandbox import Sandbox

        self.reads = tuple(reads)
        #: ``resident``: "auto" leases the services from the resident session (``portability.resident``),
        #: "off" starts them for this session; None: ``$PORTABILITY_RESIDENT``
        self.services = Services(Sandbox(mode=mode, read=self.reads).to_dict(), resident)

    def readable(self, own: tuple[str, ...]) -> None:
        """Add a check's readable folders to what the session's services may read (before they start)."""
        sb = dict(self.services.sandbox)
        sb["read"] = sorted(set(sb.get("read") or ()) | set(own))
        self.services.sandbox.clear()
        self.services.sandbox.update(sb)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        from portability.workers import shutdown

        try:
            self.services.close()
        finally:
            shutdown()
