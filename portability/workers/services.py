"""Services a check starts once and shares with its workers: a headless Chromium per flavour
(``browser``, ``browser-webgpu``: ``web/service.py``) and the emulated ARM64 interpreter (``arm64``:
``mobile/arm64_service.py``).

A runtime names the service it uses and declares its provider (``Runtime.service``, ``Runtime.providers``:
read through ``Runtime.facts``, and ``declare``-d here by the check); the check leases it before the target's
worker starts and puts its endpoint in the job (``Job.services``). A worker whose target hung or crashed
gives its lease back as unwell: the service is replaced for the targets after it. A provider is any object
with ``lease(flavour) -> handle`` (``handle.endpoint``: a string), ``release(handle, unwell)`` and
``close()``; it starts lazily, on the first lease.
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

    def __init__(self, sandbox: dict | None = None):
        self._lock = threading.Lock()
        self._providers: dict[str, Any] = {}
        #: service name -> (provider class "module:Class", the flavour its lease asks for), as runtimes declare
        self._known: dict[str, tuple[str, Any]] = {}
        #: the OS sandbox (``core.sandbox.Sandbox.to_dict``: its mode and what it may read) of the services
        #: that read model content (the emulated ARM64 server); each adds the folder it writes
        self.sandbox = dict(sandbox or {})

    def _provider(self, cls_path: str):
        with self._lock:
            p = self._providers.get(cls_path)
            if p is None:
                mod, _, name = cls_path.partition(":")
                p = self._providers[cls_path] = getattr(importlib.import_module(mod), name)()
                p.sandbox = self.sandbox
            return p

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
        provider = self._provider(cls_path)
        try:
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
    def release(lease, unwell: bool = False) -> None:
        if lease is not None:
            provider, handle = lease
            provider.release(handle, unwell=unwell)

    def close(self) -> None:
        with self._lock:
            providers, self._providers = list(self._providers.values()), {}
        for p in providers:
            try:
                p.close()
            except Exception as e:  # stopping one service must not keep the others running
                log.warning("stopping a shared service: %s", e)
