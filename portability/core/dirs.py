"""Where the tool keeps things by default: the artifact cache (converted models, provisioned environments)."""
from __future__ import annotations

import os
from pathlib import Path


def default_root() -> Path:
    env = os.environ.get("PORTABILITY_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "portability"


def tools_root() -> Path:
    """Where the converters that live apart are provisioned (onnx2tf 2.x's package folder, litert-torch's virtual
    environment): ``$PORTABILITY_TOOLS_DIR``, else ``<cache>/tools``."""
    env = os.environ.get("PORTABILITY_TOOLS_DIR")
    return Path(env) if env else default_root() / "tools"
