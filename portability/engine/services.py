"""Services a check starts once and shares with its workers: a headless Chromium per flavour
(``browser``, ``browser-webgpu``: ``web/service.py``) and the emulated ARM64 interpreter (``arm64``:
``mobile/arm64_service.py``).

A runtime names the service it uses (``Runtime.service()``); the check leases it before the target's
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

#: service name -> (provider class "module:Class", the flavour its lease asks for)
PROVIDERS: dict[str, tuple[str, Any]] = {
    "browser": ("portability.web.service:BrowserService", False),
    "browser-webgpu": ("portability.web.service:BrowserService", True),
    "arm64": ("portability.mobile.arm64_service:Arm64Service", None),
}


class Services:
    """The services of one check (thread-safe). ``lease(name)`` gives ``(endpoint, lease)`` or ``(None,
    None)`` when the service cannot start (the worker then does without: its own browser, its own
    emulator)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._providers: dict[str, Any] = {}

    def _provider(self, cls_path: str):
        with self._lock:
            p = self._providers.get(cls_path)
            if p is None:
                mod, _, name = cls_path.partition(":")
                p = self._providers[cls_path] = getattr(importlib.import_module(mod), name)()
            return p

    def lease(self, name: str | None) -> tuple[str | None, Any]:
        if not name or name not in PROVIDERS:
            return None, None
        cls_path, flavour = PROVIDERS[name]
        provider = self._provider(cls_path)
        try:
            handle = provider.lease(flavour)
        except (OSError, RuntimeError) as e:
            log.warning("shared %s unavailable: %s", name, e)
            return None, None
        return handle.endpoint, (provider, handle)

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
