"""web/ort-webnn: onnxruntime-web's WebNN provider runs where the browser has a WebNN backend; where it has
none (Debian's Chromium is built without one), the target is skipped with what was tried — never a
load-error blamed on the model, never a silent fall back to wasm."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, by_id, check_json

pytestmark = pytest.mark.web


def test_webnn_runs_or_is_skipped_with_what_was_tried(tmp_path):
    r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "web/ort-webnn,web/ort-wasm", "--allow-skipped")
    t = by_id(r)
    assert t["web/ort-wasm"]["status"] == "pass"
    nn = t["web/ort-webnn"]
    if nn["status"] == "skipped":
        assert "WebNN unavailable" in nn["error"] and "createContext" in nn["error"]
        assert "--enable-features=WebMachineLearningNeuralNetwork" in nn["error"] and nn["hint"]
    else:  # a browser with a backend: it ran on WebNN, or said which nodes fell back
        assert nn["status"] in ("pass", "fallback", "drift"), nn
        assert "webnn" in str(nn["details"].get("node_placement")).lower()
