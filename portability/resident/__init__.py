"""The resident session: the shared services a check would start (the headless Chromium of each flavour, the
emulated ARM64 interpreter) kept running between checks by a small background process of the user's own,
reached over a Unix socket in a folder only that user can open.

The first check starts it (``PORTABILITY_RESIDENT=auto``, the default; ``portability serve`` starts it by
hand), later checks lease its services instead of starting their own, and it stops by itself after an idle
period (``--idle``, default :data:`~portability.resident.client.IDLE_S`) or when asked (``portability serve
--stop``). A check that cannot reach it starts its own services, as without it, and says so in its notes.

What a resident service reads is what the current check gives it: a page gets its model from the check's
worker over the DevTools protocol, the emulator gets its model's bytes in its load request (its OS sandbox
reads its own root file system only). A lease is a connection: when a check ends, or dies, its leases end with
it; a target that hung or crashed gives its service back as unwell and the service is replaced (the providers'
own rule, ``core.shared.SharedProcesses``). The services live under the resident process on lifelines (their
stdin): when it is killed they stop, the checks' targets that were using them fail with an error that says so,
and the next check starts a new resident process.

``client.py`` is what a check uses (finding, starting and leasing from the resident process), ``server.py``
the resident process itself, ``protocol.py`` what crosses the socket between them.
"""
