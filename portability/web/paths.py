"""Where the web platform's pieces are: the harness (package data), the npm packages, Chromium.

The npm packages the pages load are pinned by ``npm/package.json`` and ``npm/package-lock.json`` (package
data: a wheel carries them). They are found, in order: in ``$PORTABILITY_WEB_MODULES``; in a source checkout's
``platforms/web/node_modules`` (its setup script runs ``npm ci`` there); in the user's cache,
``<cache>/web-modules/<lock hash>/node_modules`` (``<cache>``: ``$PORTABILITY_CACHE_DIR``, else
``$XDG_CACHE_HOME/portability``, else ``~/.cache/portability``), where ``portability setup web`` installs them.
Checks here are file checks only, so ``availability()`` stays cheap.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from portability.core.availability import Availability

CHROMIUM = "/usr/bin/chromium"
HARNESS_DIR = Path(__file__).resolve().parent / "harness"
#: the pinned npm manifest and lock (package data)
NPM_DIR = Path(__file__).resolve().parent / "npm"
#: <repo>/platforms/web: where a source checkout's setup script runs ``npm ci``
PLATFORM_DIR = Path(__file__).resolve().parents[2] / "platforms" / "web"
MODULES_ENV = "PORTABILITY_WEB_MODULES"
SETUP_HINT = "portability setup web"
CHROMIUM_HINT = "apt-get install -y chromium, then: portability setup web"
#: kept for callers that name it: the one command that installs the npm packages
NPM_FIX = SETUP_HINT


def engine_dirs() -> tuple[str, ...]:
    """The npm folders the browser engines' pages load: every registered web runtime's own
    (``WebRuntime.served_dirs``), read from the targets registry when asked (``ENGINE_DIRS`` names the same)."""
    from portability.targets import npm_dirs

    return npm_dirs()


def __getattr__(name: str):
    """``ENGINE_DIRS``: computed when read (``engine_dirs``), never a list of engines written here."""
    if name == "ENGINE_DIRS":
        return engine_dirs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def lock_hash() -> str:
    """The first 16 hex digits of the packaged lock's sha256: the cache folder's key."""
    return hashlib.sha256((NPM_DIR / "package-lock.json").read_bytes()).hexdigest()[:16]


def cache_modules_dir() -> Path:
    """Where ``portability setup web`` installs the npm packages: ``<cache>/web-modules/<lock hash>/node_modules``."""
    from portability.core.dirs import default_root

    return default_root() / "web-modules" / lock_hash() / "node_modules"


def checkout_modules_dir() -> Path:
    return PLATFORM_DIR / "node_modules"


def modules_dir() -> Path:
    """``$PORTABILITY_WEB_MODULES``, else a checkout's ``platforms/web/node_modules`` where there is one, else
    the user cache's folder (which may not exist yet: ``portability setup web`` makes it)."""
    env = os.environ.get(MODULES_ENV)
    if env:
        return Path(env)
    if checkout_modules_dir().is_dir():
        return checkout_modules_dir()
    return cache_modules_dir()


def chromium_path() -> str:
    return os.environ.get("PORTABILITY_CHROMIUM", CHROMIUM)


def package_version(package: str) -> str:
    import json

    try:
        return json.loads((modules_dir() / package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return "absent"


def web_availability(packages: dict[str, str]) -> Availability:
    """Chromium and the npm packages (package -> a file that must exist in it: a partial install is a
    missing one), by file checks only. The browser is driven over the DevTools protocol by
    ``web/cdp.py`` (standard library only)."""
    if not os.access(chromium_path(), os.X_OK):
        return Availability(False, f"Chromium not found at {chromium_path()}", CHROMIUM_HINT)
    mods = modules_dir()
    for pkg, required in packages.items():
        if not (mods / pkg / required).is_file():
            where = f" (${MODULES_ENV})" if os.environ.get(MODULES_ENV) else ""
            return Availability(False, f"npm package '{pkg}' is not installed in {mods}{where}", SETUP_HINT)
    return Availability(True)
