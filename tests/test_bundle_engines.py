"""What a bundle needs of an engine it asks the engine: a web engine added as its runtime module, its harness
module and a target line (nothing in ``bundle/``, ``web/`` or ``workers/``) is checked, bundled and run by the
bundle's page; and a device's result is judged by the check's own verdict: TF.js WebGPU that ran on WebGL in a
browser without a WebGPU adapter is a ``fallback`` on the page and after ``ingest``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, by_id, run_cli
from portability.core.target import Target

pytestmark = [pytest.mark.web]

LENET = ROOT / "fixtures" / "lenet.onnx"
#: the new engine's target line
TWIN = Target(id="web/tfjs-twin", runtime="web_twin:TfjsTwin", options={"backend": "cpu"},
              description="a second TF.js under a name of its own (tests/web_twin.py)")


def _missing() -> str | None:
    from portability.runtimes.tfjs import Tfjs

    a = Tfjs.availability()
    return None if a.ok else f"{a.reason} (fix: {a.hint})"


_WHY = _missing()


def _page_result(folder: Path) -> dict:
    """The bundle's page served from ``folder`` and run in headless Chromium started without WebGPU (no
    adapter): its ``result.json``."""
    from portability.bundle.serve import BundleServer
    from portability.web.browser import Browser

    server = BundleServer(folder).start()
    try:
        browser = Browser().start()
        try:
            browser.new_page(server.url)
            browser.wait_for("() => window.bundleResult !== undefined || window.bundleError !== undefined", 180)
            assert browser.call("() => window.bundleError") is None
            return browser.call("() => window.bundleResult")
        finally:
            browser.close()
    finally:
        server.close()


@pytest.fixture
def twin(monkeypatch):
    """The new engine's harness module beside the others, and its target line in the web targets."""
    if _WHY:
        pytest.skip(f"web stack missing: {_WHY}")
    from web_twin import PAGE_MODULE, TfjsTwin

    from portability.targets import web
    from portability.web.paths import HARNESS_DIR

    page = HARNESS_DIR / f"{TfjsTwin.engine}.mjs"
    page.write_text(PAGE_MODULE)
    monkeypatch.setattr(web, "TARGETS", [*web.TARGETS, TWIN])
    try:
        yield TfjsTwin
    finally:
        page.unlink()


def test_a_new_web_engine_is_checked_bundled_and_run(twin, tmp_path):
    from portability.bundle.web import build

    b = build(LENET, TWIN.id, tmp_path / "site")
    assert b.report.target(TWIN.id).status == "pass", b.report.target(TWIN.id)
    [entry] = b.manifest["targets"]
    assert entry["engine"] == twin.engine and entry["accepts"] == {"backend": "cpu"}
    assert (tmp_path / "site" / "h" / f"{twin.engine}.mjs").is_file()
    assert (tmp_path / "site" / "m" / "@tensorflow" / "tfjs" / "dist" / "tf.min.js").is_file()
    [row] = _page_result(tmp_path / "site")["targets"]
    assert row["id"] == TWIN.id and row["status"] == "pass" and row["info"]["backend"] == "cpu", row


def test_a_backend_not_accepted_is_a_fallback_on_the_page_and_after_ingest(tmp_path):
    if _WHY:
        pytest.skip(f"web stack missing: {_WHY}")
    from portability.bundle.ingest import merge, read
    from portability.bundle.result_file import Refused
    from portability.bundle.web import build
    from portability.report.files import write_json

    tid = "web/tfjs-webgpu"
    b = build(LENET, tid, tmp_path / "site")
    if b.report.target(tid).status != "pass":  # the check's own browser has a (software) WebGPU adapter
        pytest.skip(f"{tid} did not run here: {b.report.target(tid).error}")
    result = _page_result(tmp_path / "site")
    if result["device"]["gpu"] is not None:
        pytest.skip("this browser has a WebGPU adapter even without the WebGPU flags")
    [row] = result["targets"]
    used = row["info"]["backend"]
    assert used != "webgpu" and row["info"]["backend_accepted"] is False, row["info"]
    assert row["status"] == "fallback" and row["breaches"][0] == f"asked for webgpu, ran on {used}", row
    path, report = tmp_path / "result.json", tmp_path / "report.json"
    path.write_text(json.dumps(result))
    write_json(b.report, report)
    p = run_cli("ingest", str(path), "--report", str(report), "--out", str(tmp_path / "joined.json"), "--no-history")
    assert p.returncode == 0, p.stderr
    [got] = [t for i, t in by_id(json.loads((tmp_path / "joined.json").read_text())).items() if i.startswith(tid + "@")]
    assert got["status"] == "fallback" and got["breaches"][0] == f"asked for webgpu, ran on {used}", got
    assert got["metrics"]["outputs"] and got["error"] is None
    # a page that judged by the metrics alone (as pages did) is corrected, not believed
    row.update(status="pass", breaches=[])
    path.write_text(json.dumps(result))
    _, [added] = merge(b.report, read(path), str(path))
    assert added.status == "fallback"
    # a fallback its engine's own account does not bear out is refused
    row.update(status="fallback", info=dict(row["info"], backend="webgpu"))
    path.write_text(json.dumps(result))
    with pytest.raises(Refused, match="says fallback"):
        merge(b.report, read(path), str(path))
