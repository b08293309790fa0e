"""Legacy MXNet checkpoints (``NAME-symbol.json`` + ``NAME-0000.params``) as a source: described, run and
referenced by MXNet 1.9 in its own environment, routed to every target through MXNet's ONNX exporter.
The checkpoint is built here, in that environment, from a seeded Gluon network (no binary fixture)."""
from __future__ import annotations

import subprocess

import pytest

from conftest import by_id, check_json, run_cli
from portability.core import mxnet_env
from portability.sources import detect

_OK, _WHY = mxnet_env.status()

BUILD = """
import numpy as np
np.bool = bool
import mxnet as mx
from mxnet.gluon import nn
mx.random.seed(0)
np.random.seed(0)
net = nn.HybridSequential()
net.add(nn.Conv2D(4, 3, activation="relu"), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(16, activation="relu"), nn.Dense(10))
net.initialize(mx.init.Xavier())
net.hybridize()
net(mx.nd.zeros((1, 1, 28, 28)))
net.export(OUT + "/tiny", epoch=0)
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    if not _OK:
        pytest.skip(_WHY)
    d = tmp_path_factory.mktemp("mxnet")
    subprocess.run([str(mxnet_env.python()), "-c", f"OUT = {str(d)!r}\n" + BUILD], check=True, env=mxnet_env.env(),
                   capture_output=True, timeout=300)
    return d


def test_an_mxnet_checkpoint_is_detected_by_its_names(tmp_path):
    (tmp_path / "net-symbol.json").write_text("{}")
    (tmp_path / "model.json").write_text("{}")
    assert detect(tmp_path / "net-symbol.json") == "mxnet" and detect(tmp_path / "model.json") == "tfjs"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "net-symbol.json").write_text("{}")
    assert detect(ckpt) == "mxnet"


@pytest.mark.mxnet
def test_a_legacy_mxnet_checkpoint_is_checked_against_mxnet_itself(tmp_path, checkpoint):
    r = check_json(tmp_path, checkpoint / "tiny-symbol.json", "--shape", "data=2x1x28x28",
                   "--targets", "server/ort-cpu,mobile/tflite-fp32,web/ort-wasm", "--runs", "3")
    assert r["reference"] == "server/mxnet"
    assert r["model"]["format"] == "mxnet" and r["model"]["framework"].startswith("mxnet 1.9")
    assert [i["shape"] for i in r["model"]["inputs"]] == [[None, 1, 28, 28]]
    t = by_id(r)
    assert all(x["status"] == "pass" for x in t.values()), {k: (v["status"], v["error"]) for k, v in t.items()}
    ort = t["server/ort-cpu"]
    assert any("OnnxFromMxnet" in c["converter"] or "mx2onnx" in c["converter"]
               for c in ort["details"]["conversions"]), ort["details"]["conversions"]
    out = ort["metrics"]["outputs"]
    assert list(out) == ["dense1_fwd_output"] and out["dense1_fwd_output"]["max_abs"] < 1e-5
    assert t["server/mxnet"]["metrics"]["latency_ms"]["p50"] > 0


@pytest.mark.mxnet
def test_an_mxnet_checkpoint_without_shapes_or_weights_is_one_line(tmp_path, checkpoint):
    p = run_cli("check", str(checkpoint / "tiny-symbol.json"), "--targets", "server/ort-cpu")
    assert p.returncode == 2 and "give --shape data=" in p.stderr and "Traceback" not in p.stderr
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "tiny-symbol.json").write_bytes((checkpoint / "tiny-symbol.json").read_bytes())
    p = run_cli("check", str(lone / "tiny-symbol.json"), "--shape", "data=1x1x28x28")
    assert p.returncode == 2 and "no tiny-NNNN.params beside it" in p.stderr
