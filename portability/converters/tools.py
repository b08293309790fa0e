"""Converters that live apart from this environment (a package whose name or dependencies clash with the pinned
stack): each in a folder of its own under ``core.dirs.tools_root``, installed once by ``portability setup
NAME`` (``scripts/setup.sh`` runs it), ready when its stamp file is there."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

_READY = ".ready"


@dataclass(frozen=True)
class Tool:
    name: str  # the setup command's name: ``portability setup NAME``
    package: str
    version: str
    #: where to look for it once installed (relative to its folder): ``site/onnx2tf``, ``bin/python``
    marker: str

    @property
    def folder(self) -> Path:
        from portability.core.dirs import tools_root

        return tools_root() / f"{self.package}-{self.version}"

    def status(self) -> tuple[bool, str]:
        if (self.folder / _READY).is_file() and (self.folder / self.marker).exists():
            return True, f"{self.package} {self.version} ready: {self.folder}"
        return False, f"{self.package} {self.version} is not provisioned ({self.folder} is missing)"

    def unavailable(self):
        from portability.core.errors import Unavailable

        return Unavailable(self.status()[1], f"portability setup {self.name}")

    def provision(self, commands: Callable[[Path], list[list[str]]], log: Callable[[str], None] = print) -> Path:
        """Run ``commands(folder)`` in a fresh folder, then stamp it; idempotent. Raises RuntimeError with
        the failing command's last meaningful line."""
        if self.status()[0]:
            return self.folder
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        for cmd in commands(self.folder):
            log("$ " + " ".join(cmd))
            p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if p.returncode != 0:
                lines = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
                raise RuntimeError((lines or [f"exit {p.returncode}"])[-1])
        (self.folder / _READY).write_text(self.version)
        log(f"{self.package} {self.version}: {self.folder}")
        return self.folder
