"""The HTML report opened in the Chromium the web platform uses: it loads offline (no request leaves the
file), its four plots render as SVG with real size, and a screenshot of them is not blank.

The screenshots are kept as test artifacts under $PORTABILITY_TEST_ARTIFACTS (else pytest's tmp dir).
"""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli


def _browser_missing() -> str | None:
    from portability.web.paths import chromium_path

    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install playwright)"
    if not Path(chromium_path()).is_file():
        return f"no Chromium at {chromium_path()} (apt-get install chromium)"
    return None


_WHY = _browser_missing()
pytestmark = [pytest.mark.web, pytest.mark.skipif(_WHY is not None, reason=f"browser missing: {_WHY}")]


#: every figure's title, its plot's size and how many shapes the plot has
FIGURES = """() => [...document.querySelectorAll('figure')].map(f => {
  const s = f.querySelector('svg'); const r = s ? s.getBoundingClientRect() : {width: 0, height: 0};
  return {title: f.querySelector('figcaption').textContent, w: r.width, h: r.height,
          shapes: s ? s.querySelectorAll('path, rect, use').length : 0}; })"""


@pytest.fixture
def artifacts(tmp_path) -> Path:
    d = Path(os.environ.get("PORTABILITY_TEST_ARTIFACTS") or tmp_path / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _ink(png: bytes) -> float:
    """Share of pixels that differ clearly from the image's most common colour (its background)."""
    import io

    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.int16)
    flat = a.reshape(-1, 3)
    colors, counts = np.unique(flat, axis=0, return_counts=True)
    bg = colors[counts.argmax()]
    return float((np.abs(flat - bg).sum(axis=1) > 60).mean())


def _render(html: Path) -> tuple[list[str], list[dict], dict[str, bytes], bytes]:
    """Open the report in Chromium (driven by Playwright, for its screenshots): the resources it fetched,
    its figures' sizes, a screenshot of each plot and one of the whole page."""
    import shutil
    import tempfile

    from playwright.sync_api import sync_playwright

    from portability.web.chromium import ARGS, short_tmp
    from portability.web.paths import chromium_path

    profile = tempfile.mkdtemp(prefix="portability-chromium-", dir=short_tmp())
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(profile, executable_path=chromium_path(), headless=True, args=ARGS,
                                                        env={**os.environ, "TMPDIR": profile})
            try:
                page = ctx.new_page()
                page.set_viewport_size({"width": 1280, "height": 900})
                page.goto(html.as_uri())
                fetched = page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name)")
                figs = page.evaluate(FIGURES)
                shots = {fig["title"]: page.locator("figure").nth(i).locator("svg").screenshot() for i, fig in enumerate(figs)}
                return fetched, figs, shots, page.screenshot(full_page=True)
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_html_report_renders_its_plots_in_chromium(tmp_path, artifacts, monkeypatch):
    monkeypatch.setenv("PORTABILITY_DATA_DIR", str(tmp_path / "data"))
    html = tmp_path / "report.html"
    p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--dataset", str(FIXTURES / "digits.npz"), "-t",
                "server/ort-cpu-noopt,server/onnx-reference,test/noisy", "--gate", "-test/noisy", "--runs", "20",
                "--html", str(html), "--json", str(tmp_path / "r.json"), env={"PORTABILITY_PLUGINS": "doubles"})
    assert p.returncode == 0, p.stderr
    fetched, figs, shots, full = _render(html)
    (artifacts / "report.png").write_bytes(full)
    for title, png in shots.items():
        (artifacts / f"plot-{title.lower().replace(' ', '-')}.png").write_bytes(png)

    assert fetched == [], f"the report fetched something: {fetched}"
    assert [f["title"] for f in figs] == ["Drift per target", "Latency per target", "Size per format and variant",
                                          "Accuracy per target"]
    for f in figs:
        assert f["w"] > 300 and f["h"] > 100 and f["shapes"] > 20, f
    for title, png in shots.items():
        ink = _ink(png)
        assert 0.02 < ink < 0.9, f"plot '{title}' looks blank (ink {ink:.3f})"
    text = html.read_text()
    assert all(t["id"] in text for t in json.loads((tmp_path / "r.json").read_text())["targets"])
