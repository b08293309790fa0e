"""Where the tool keeps things by default: the artifact cache (converted models, provisioned environments), and
the private folder of its background processes' sockets."""
from __future__ import annotations

import os
import stat
import tempfile
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


class NotPrivate(Exception):
    """A folder that must be this user's alone is not (another user owns it, others may open it, or it is a link
    or a file); ``str()`` names it in one line."""


def check_private(d: Path) -> Path:
    """``d`` itself (not a link to it): a folder this user owns that no one else may open. Raises NotPrivate, or
    OSError where it cannot be looked at."""
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode):
        raise NotPrivate(f"{d} is not a folder (a link or a file is there)")
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise NotPrivate(f"{d} is not this user's own folder (owner {st.st_uid}, mode {oct(st.st_mode & 0o777)})")
    return d


def private_dir(d: Path) -> Path:
    """``d``, made (mode 0700, its parents too) where missing, then checked as ``check_private`` does."""
    try:
        d.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    return check_private(d)


def runtime_dir() -> Path:
    """This user's folder for the sockets and logs of the tool's background processes: ``$XDG_RUNTIME_DIR/portability``
    where that variable names a writable folder, else ``<tmp>/portability-<uid>`` (``<tmp>``: ``$TMPDIR``, else
    ``/tmp``). Where another user took that name first (or a link is there), the first folder
    ``<tmp>/portability-<uid>-*`` that is this user's alone, made now where there is none. Raises NotPrivate
    where none can be had."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.access(base, os.W_OK):
        return _or_not_private(Path(base) / "portability")
    tmp = Path(tempfile.gettempdir())
    usual = tmp / f"portability-{os.getuid()}"
    try:
        return private_dir(usual)
    except NotPrivate as e:
        why = str(e)
    except OSError as e:
        why = f"{usual}: {e.strerror or e}"
    for d in sorted(tmp.glob(f"portability-{os.getuid()}-*")):
        try:
            return check_private(d)
        except (NotPrivate, OSError):
            continue
    try:
        return Path(tempfile.mkdtemp(prefix=f"portability-{os.getuid()}-", dir=tmp))
    except OSError as e:
        raise NotPrivate(f"no folder of this user's for the tool's sockets: {why}; and none could be made "
                         f"in {tmp} ({e.strerror or e})") from None


def _or_not_private(d: Path) -> Path:
    try:
        return private_dir(d)
    except OSError as e:
        raise NotPrivate(f"{d}: {e.strerror or e}") from None

