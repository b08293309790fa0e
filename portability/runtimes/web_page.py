"""What a web engine's page needs to run from plain files, without the harness server: a bundle's page.

``bundle/web.py`` asks a target's runtime (a ``WebRuntime``, which is a ``StaticPage``) for these and names no
engine itself: an engine declares them by overriding the defaults here in its own class.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portability.core.artifact import Artifact


class StaticPage:
    """The defaults: every file the engine's page may fetch, the page configuration as the harness server gets
    it, outputs under their ONNX names and layout."""

    served_dirs: Any
    page_config: Any

    @classmethod
    def npm_files(cls, config: dict[str, Any]) -> list[str]:
        """The ``node_modules`` paths the page loads for the page configuration ``config`` (default: every file of
        the folders it is served, source maps aside)."""
        from portability.web.paths import modules_dir

        root = modules_dir()
        return [str(p.relative_to(root)) for d in cls.served_dirs() for p in sorted((root / d).rglob("*"))
                if p.is_file() and p.suffix != ".map"]

    def static_config(self, artifact: Artifact, blobs) -> dict[str, Any]:
        """``page_config`` for a page of plain files: what it would put on the harness server goes to
        ``blobs.put_blob(name, data)``, which gives the blob's URL relative to the page."""
        self._server = blobs
        return self.page_config(artifact)

    def page_outputs(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ONNX-named, ONNX-layout outputs -> the page's keys and layout: the inverse of ``from_page`` (after
        ``page_config``), the form in which the page compares the reference's outputs."""
        return outputs

    def page_output_names(self) -> dict[str, str]:
        """{the page's output key: the ONNX output name} where they differ (after ``page_config``)."""
        return {}
