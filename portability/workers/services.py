"""Services a check starts once and shares with its workers: a headless Chromium per flavour
(``browser``, ``browser-webgpu``: ``web/service.py``) and the emulated ARM64 interpreter (``arm64``:
``mobile/arm64_service.py``).

A runtime names the service it uses and declares its provider (``Runtime.service``, ``Runtime.providers``:
read through ``Runtime.facts``, and ``declare``-d here by the check); the check leases it before the target's
worker starts and puts its endpoint in the job (``Job.services``). A worker whose target hung or crashed
gives its lease back as unwell: the service is replaced for the targets after it. A provider is any object
with ``lease(flavour) -> handle`` (``handle.endpoint``: a string), ``release(handle, unwell)`` and
``close()``; it starts lazily, on the first lease.

With the resident session (``portability.resident``; ``PORTABILITY_RESIDENT=auto``, the default) a provider
is the resident process's (``resident.client.RemoteProvider``): its services outlive the check. Where the
resident process cannot be reached, the check's own provider takes over, and ``notes`` says so.
"""
from __future__ import annotations

import importlib
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


class Services:
    """The services of one check (thread-safe). ``lease(name)`` gives ``(endpoint, lease)`` or ``(None,
    None)`` when the service cannot start (the worker then does without: its own browser, its own
    emulator)."""

    def __init__(self, sandbox: dict | None = None, resident: str | None = None):
        from portability.resident import client

        self._lock = threading.Lock()
        self._providers: dict[str, Any] = {}
        #: the resident session's socket, where this check's services come from it (else None)
        self.resident = client.socket_path() if (resident or client.mode()) == "auto" and _reachable() else None
        #: what the check should know of where its services came from
        self.notes: list[str] = []
        #: service name -> (provider class "module:Class", the flavour its lease asks for), as runtimes declare
        self._known: dict[str, tuple[str, Any]] = {}
        #: the OS sandbox (``core.sandbox.Sandbox.to_dict``: its mode and what it may read) of the services
        #: that read model content (the emulated ARM64 server); each adds the folder it writes
        self.sandbox = dict(sandbox or {})

    def _provider(self, cls_path: str, local: bool = False):
        with self._lock:
            p = self._providers.get(cls_path)
            if p is None or local:
                if self.resident and not local:
                    from portability.resident.client import RemoteProvider

                    p = RemoteProvider(cls_path, self.resident)
                else:
                    mod, _, name = cls_path.partition(":")
                    p = getattr(importlib.import_module(mod), name)()
                p.sandbox = self.sandbox
                self._providers[cls_path] = p
            return p

    def _fallback(self, name: str, cls_path: str, why: Exception):
        """The check's own provider for ``cls_path``, the resident session being out of reach."""
        with self._lock:
            note = f"the resident session could not be used ({why}): this check started its own services"
            if note not in self.notes:
                self.notes.append(note)
        log.warning("%s: %s", name, why)
        return self._provider(cls_path, local=True)

    def declare(self, name: str, provider: tuple[str, Any]) -> None:
        """A runtime's service: its name and its provider (``("module:Class", flavour)``)."""
        with self._lock:
            self._known.setdefault(name, tuple(provider))

    def running(self, name: str) -> bool:
        """The service is up (a lease is immediate), not to be started or waited for."""
        if name not in self._known:
            return False
        cls_path, flavour = self._known[name]
        return self._provider(cls_path).running(flavour)

    def lease(self, name: str | None) -> tuple[str | None, Any]:
        if not name or name not in self._known:
            return None, None
        cls_path, flavour = self._known[name]
        from portability.resident.client import Unreachable

        provider = self._provider(cls_path)
        try:
            try:
                handle = provider.lease(flavour)
            except Unreachable as e:
                provider = self._fallback(name, cls_path, e)
                handle = provider.lease(flavour)
        except (OSError, RuntimeError) as e:
            log.warning("shared %s unavailable: %s", name, e)
            return None, None
        return handle.endpoint, (provider, handle)

    def prestart(self, names: set[str]) -> None:
        """Start these services in the background (each in a thread of its own) while the check does
        other work: a target then leases a running one instead of waiting for its start."""
        def start(name: str) -> None:
            endpoint, lease = self.lease(name)
            self.release(lease)

        for name in sorted(n for n in names if n in self._known):
            threading.Thread(target=start, args=(name,), name=f"start {name}", daemon=True).start()

    @staticmethod
    def lost(lease) -> int | None:
        """The resident process's pid, where the service of this lease went away with it; else None."""
        handle = lease[1] if lease is not None else None
        return handle.pid if getattr(handle, "lost", False) else None

    @staticmethod
    def release(lease, unwell: bool = False) -> None:
        if lease is not None:
            provider, handle = lease
            provider.release(handle, unwell=unwell)

    def close(self) -> None:
        from portability.core.shared import close_all

        with self._lock:
            providers, self._providers = list(self._providers.values()), {}
        close_all(providers, log)


def _reachable() -> bool:
    """The resident session's folder is this user's own (else checks start their own services)."""
    from portability.resident.client import Unreachable, runtime_dir

    try:
        runtime_dir()
        return True
    except (Unreachable, OSError) as e:
        log.warning("no resident session: %s", e)
        return False
