"""``portability history --html DIR``: the static history site, opened in the Chromium the web platform
uses. Its pages load offline, each model's page plots drift, accuracy, size and latency per target across
runs (a versioned target is a line of its own), and every run links to its own report."""
from __future__ import annotations

import re

import pytest

from conftest import FIXTURES, run_cli
from test_report_html import _WHY, _ink, _render, artifacts  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.web, pytest.mark.skipif(_WHY is not None, reason=f"browser missing: {_WHY}")]


def test_the_history_site_renders_its_plots_and_links_every_run(tmp_path, artifacts, monkeypatch):  # noqa: F811
    monkeypatch.setenv("PORTABILITY_DATA_DIR", str(tmp_path / "data"))
    for args in ((), ("--seed", "1"), ("--versions", "onnxruntime=1.20.1")):
        p = run_cli("check", str(FIXTURES / "lenet.onnx"), "--dataset", str(FIXTURES / "digits.npz"), "-t",
                    "server/ort-cpu,server/ort-cpu-noopt", "--runs", "10", *args)
        assert p.returncode == 0, p.stderr
    site = tmp_path / "site"
    p = run_cli("history", "--html", str(site))
    assert p.returncode == 0 and "3 runs, 1 models" in p.stderr, p.stderr
    index = (site / "index.html").read_text()
    page = site / re.search(r'href="(model-[^"]+\.html)"', index).group(1)
    text = page.read_text()
    runs = re.findall(r'href="(runs/\d+\.html)"', text)
    assert len(runs) == 3 and all((site / r).is_file() for r in runs)
    assert "server/ort-cpu-noopt@1.20.1" in text  # the other version's line

    fetched, figs, shots, full = _render(page)
    (artifacts / "history-site.png").write_bytes(full)
    assert fetched == [], f"the site fetched something: {fetched}"
    assert [f["title"] for f in figs] == ["Worst |Δ| against the reference", "Accuracy (or top-1 agreement)",
                                          "Artifact size (KB)", "p50 latency (ms)"]
    for f in figs:
        assert f["w"] > 300 and f["h"] > 100 and f["shapes"] > 10, f
    for title, png in shots.items():
        assert 0.01 < _ink(png) < 0.9, f"plot '{title}' looks blank"
