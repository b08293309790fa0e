"""Legacy MXNet checkpoints (``NAME-symbol.json`` + ``NAME-0000.params``) as a source: described, run and
referenced by MXNet 1.9 in its own environment, routed to every target through MXNet's ONNX exporter.
The checkpoint is built here, in that environment, from a seeded Gluon network (no binary fixture)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

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


def test_an_audit_folder_lists_an_mxnet_checkpoint_once(tmp_path):
    """The audit's models are the entries a source claims: the checkpoint is its ``-symbol.json`` (the
    ``.params`` beside it is no model of its own), beside the other kinds; other ``.json`` files are none."""
    from portability.audit.corpus import items

    (tmp_path / "tiny-symbol.json").write_text("{}")
    (tmp_path / "tiny-0000.params").write_bytes(b"\0" * 8)
    (tmp_path / "labels.json").write_text("[]")
    (tmp_path / "net.onnx").write_bytes(b"")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "other-symbol.json").write_text("{}")
    (tmp_path / "tfjs").mkdir()
    (tmp_path / "tfjs" / "model.json").write_text("{}")
    (tmp_path / "notes").mkdir()
    found, _, _ = items(tmp_path)
    assert [i.path.name for i in found] == ["ckpt", "net.onnx", "tfjs", "tiny-symbol.json"]
    assert detect(tmp_path / "labels.json") == "tfjs"  # given by name, a .json is still read as TF.js's


@pytest.mark.mxnet
def test_a_folder_audit_checks_its_mxnet_checkpoint(tmp_path, checkpoint):
    d = tmp_path / "models"
    d.mkdir()
    for f in checkpoint.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "audit.json"
    p = run_cli("audit", str(d), "--shape", "data=2x1x28x28", "--targets", "server/ort-cpu", "--runs", "3",
                "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(out.read_text())
    assert [Path(m["path"]).name for m in doc["models"]] == ["tiny-symbol.json"]
    t = {x["id"]: x for x in doc["models"][0]["targets"]}
    assert t["server/ort-cpu"]["status"] == "pass" and t["server/mxnet"]["status"] == "pass", t
