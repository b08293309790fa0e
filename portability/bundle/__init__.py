"""Bundles of web targets to run in a person's own browser (``bundle/web.py``) and of mobile targets to run
on a device with Python (``bundle/mobile.py``), and the results brought back (``bundle/ingest.py``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from portability.core.errors import UsageError

#: the platforms a bundle is made for, one per bundle
PLATFORMS = ("web", "mobile")


def platform_of(targets: str) -> str:
    """The one bundle platform that ``targets`` names (platforms or target ids); a UsageError otherwise."""
    from portability.targets import expand

    found = sorted({t.platform for t in expand(targets)[1:] if t.platform in PLATFORMS})
    if len(found) != 1:
        raise UsageError(f"--targets {targets} names " + (f"{' and '.join(found)} targets: give one platform per bundle"
                                                           if found else "no web or mobile target"))
    return found[0]


def build(model: Path, targets: str, folder: Path, **options: Any):
    """The bundle of ``targets``' platform (``web.build`` or ``mobile.build``)."""
    if platform_of(targets) == "mobile":
        from portability.bundle.mobile import build as mobile_build

        return mobile_build(model, targets, folder, **options)
    from portability.bundle.web import build as web_build

    return web_build(model, targets, folder, **options)
