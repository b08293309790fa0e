"""Where the web platform's pieces are: the harness (package data), the npm packages, Chromium.

Checks here are file checks only, so ``availability()`` stays cheap.
"""
from __future__ import annotations

import os
from pathlib import Path

from portability.core.availability import Availability

CHROMIUM = "/usr/bin/chromium"
HARNESS_DIR = Path(__file__).resolve().parent / "harness"
#: <repo>/platforms/web: where ``npm ci`` puts node_modules in a source checkout
PLATFORM_DIR = Path(__file__).resolve().parents[2] / "platforms" / "web"
NPM_FIX = "scripts/setup.sh  (or: cd platforms/web && npm ci)"

#: the npm folders the browser engines' pages load (onnxruntime-web, TF.js and its backends, LiteRT.js)
ENGINE_DIRS = ("onnxruntime-web/dist", "@tensorflow/tfjs/dist", "@tensorflow/tfjs-backend-wasm/dist",
               "@tensorflow/tfjs-backend-webgpu/dist", "@litertjs/core/dist", "@litertjs/core/wasm",
               "@litertjs/wasm-utils/dist")


def modules_dir() -> Path:
    """``$PORTABILITY_WEB_MODULES`` or ``<repo>/platforms/web/node_modules``."""
    env = os.environ.get("PORTABILITY_WEB_MODULES")
    return Path(env) if env else PLATFORM_DIR / "node_modules"


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
        return Availability(False, f"Chromium not found at {chromium_path()}", "apt-get install -y chromium")
    mods = modules_dir()
    for pkg, required in packages.items():
        if not (mods / pkg / required).is_file():
            where = "PORTABILITY_WEB_MODULES" if os.environ.get("PORTABILITY_WEB_MODULES") else "platforms/web"
            return Availability(False, f"npm package '{pkg}' is not installed in {mods} ({where})", NPM_FIX)
    return Availability(True)
