"""TensorFlow Lite's selective quantization by ONNX node: ``float_nodes`` on ``mobile/tflite-int8``.

The model: the fixture LeNet with one activation outlier channel (``quant_models.outlier_lenet``: the first
convolution's channel 3 shifted by +300, the second convolution's bias compensating). Full-integer TFLite spends
one per-tensor int8 scale on that range, and its accuracy falls; kept in float, the outlier's path through the
first block (conv → max-pool → conv) gives the float model's accuracy back, inputs and outputs still int8.
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from quant_models import outlier_lenet

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "fixtures" / "digits.npz"
TARGET = "mobile/tflite-int8"
CONV = "Int8TfliteFromSavedModel"
#: the smallest set that gives the float accuracy back (measured: the first conv alone, the second alone, and
#: both without the max-pool between them all stay 3-4 % short)
RESCUE = ["node_conv2d", "node_max_pool2d", "node_conv2d_1"]
_MISSING = [m for m in ("onnx2tf", "tensorflow", "tf_keras", "ai_edge_litert") if importlib.util.find_spec(m) is None]
needs_tflite = pytest.mark.skipif(bool(_MISSING), reason=f"TF/LiteRT stack not installed: {', '.join(_MISSING)}")


def test_tflite_names_lead_to_the_onnx_nodes_through_the_layer_record():
    """A fused op's name joins its TensorFlow ops' names; each names its Keras layer between the model's scope
    and the op (a layer named after an ONNX node may hold ``/``); constants and unknown scopes name nothing."""
    from portability.converters.tflite_debug import layer_nodes

    layers = {"tf.nn.convolution_1": "node_conv2d_1", "tf.math.add_1": "node_conv2d_1", "tf.nn.relu_1": "node_relu_1",
              "wa/backbone/conv/Conv": "/backbone/conv/Conv"}
    fused = "model_2/tf.nn.relu_1/Relu;model_2/tf.math.add_1/Add;model_2/tf.nn.convolution_1/convolution;Const_91"
    assert layer_nodes(fused, layers) == ["node_relu_1", "node_conv2d_1"]
    assert layer_nodes("model_2/wa/backbone/conv/Conv/Conv2D", layers) == ["/backbone/conv/Conv"]
    assert layer_nodes("PartitionedCall:0", layers) == [] and layer_nodes("model_2/flatten/Reshape", layers) == []
    assert layer_nodes("model_2/tf.nn.relu_1", layers) == []  # the op's own name is never a layer


def test_the_candidates_are_one_node_per_tflite_op():
    """TFLite fuses a Conv's or a Gemm's Relu into it: the Relus are no candidates of their own."""
    import onnx

    from portability.converters.onnx2tf import Int8TfliteFromSavedModel, TfliteFromSavedModel

    g = onnx.load(str(ROOT / "fixtures" / "lenet.onnx")).graph
    assert Int8TfliteFromSavedModel.keeps_float and not TfliteFromSavedModel.keeps_float
    assert Int8TfliteFromSavedModel.quantizable_nodes(g) == [
        "node_conv2d", "node_max_pool2d", "node_conv2d_1", "node_max_pool2d_1", "node_view", "node_linear",
        "node_linear_1", "node_linear_2"]


def test_float_nodes_is_a_list_of_names_and_only_full_integer_takes_it():
    from portability.converters.base import ConvertContext
    from portability.converters.onnx2tf import TfliteFromSavedModel
    from portability.converters.tflite_debug import float_nodes_option
    from portability.core.errors import ConvertError

    assert float_nodes_option({"float_nodes": ["a", "b", "a"]}) == ["a", "b"] and float_nodes_option({}) == []
    for bad in ("node_conv2d", [""], [3]):
        with pytest.raises(ConvertError, match="float_nodes must be a list of ONNX node names"):
            float_nodes_option({"float_nodes": bad})
    for quant in ("dynint8", "fp16"):  # TFLite's dynamic-range and float16 conversions take no per-node list
        with pytest.raises(ConvertError, match=f"float_nodes: TensorFlow Lite's {quant} conversion keeps no chosen"):
            TfliteFromSavedModel().convert(None, Path("."), {"quant": quant, "float_nodes": ["node_conv2d"]},
                                           ConvertContext())


def test_snr_from_the_statistics():
    from portability.converters.tflite_debug import snr_db

    assert snr_db(1.0, 0.01) == 20.0 and snr_db(0.0, 1.0) is None and snr_db(2.0, 0.0) == math.inf


@pytest.fixture(scope="module")
def outlier(tmp_path_factory) -> Path:
    return outlier_lenet(tmp_path_factory.mktemp("outlier") / "outlier.onnx")


def _int8(outlier: Path, float_nodes: list[str] | None):
    import portability

    opts = {"converter_options": {CONV: {"float_nodes": float_nodes}}} if float_nodes is not None else {}
    rep = portability.check(outlier, targets=TARGET, dataset=DIGITS, **opts)
    ref = next(t for t in rep.targets if t.id == rep.reference)
    return ref, next(t for t in rep.targets if t.id == TARGET)


@pytest.mark.mobile
@pytest.mark.slow
@needs_tflite
def test_float_nodes_give_the_outlier_lenets_int8_its_accuracy_back(outlier):
    ref, plain = _int8(outlier, None)
    assert plain.status == "drift", plain.error
    assert plain.metrics["accuracy"] < ref.metrics["accuracy"] - 0.04, (plain.metrics["accuracy"], ref.metrics["accuracy"])
    assert "float_nodes" not in plain.details["artifact_meta"]

    ref, kept = _int8(outlier, RESCUE)
    assert kept.status == "pass", (kept.error, kept.breaches)
    assert kept.metrics["accuracy"] >= ref.metrics["accuracy"] - 0.02
    meta = kept.details["artifact_meta"]
    # the Relus TFLite fused into the two convolutions stay float with them; the I/O stays int8
    assert meta["float_nodes"] == ["node_conv2d", "node_relu", "node_max_pool2d", "node_conv2d_1", "node_relu_1"]
    assert meta["float_nodes_asked"] == RESCUE and len(meta["float_tensors"]) == 3
    assert any("tf.nn.convolution_1/" in t for t in meta["float_tensors"])
    assert {e["dtype"] for e in meta["tflite_io"]["inputs"] + meta["tflite_io"]["outputs"]} == {"int8"}
    assert meta["calibration_source"] == "dataset" and meta["calibration_method"] == "MinMax"
    assert meta["calibration"].startswith(f"dataset ({meta['calibration_samples']} samples")
    assert kept.artifact["size_bytes"] > plain.artifact["size_bytes"]  # what the rescue costs: float weights

    _, wrong = _int8(outlier, ["node_conv2d", "node_conv2d_9"])  # never silently ignored
    assert wrong.status == "convert-error"
    assert "float_nodes: no ONNX node named 'node_conv2d_9'" in wrong.error and wrong.node == "node_conv2d_9"


@pytest.mark.mobile
@pytest.mark.slow
@needs_tflite
def test_tflites_layer_statistics_name_the_outlier_layers(outlier, tmp_path):
    """TFLite's debugger, layer by layer: the second convolution (reading the outlier channel) is the worst, by
    far; kept in float, it is no longer measured, and every layer left is within a few steps."""
    from portability.converters.base import ConvertContext
    from portability.converters.onnx2tf import SavedModelFromOnnx, tflite_layer_statistics
    from portability.core.artifact import Artifact

    sm = SavedModelFromOnnx().convert(Artifact(path=outlier, format="onnx", sha256=""), tmp_path, {}, ConvertContext())
    assert sm.meta["onnx2tf_layers"] == "tflite/onnx2tf_layers.json" and "tflite" in sm.meta["not_part"]
    with np.load(DIGITS) as z:
        ctx = ConvertContext(calibration={"x": z["x"][:64]}, calibration_source="dataset")
    rows = tflite_layer_statistics(sm, ctx)
    assert {"layer", "op", "nodes", "num_elements", "stddev", "mean_error", "max_abs_error", "mean_squared_error",
            "snr_db"} <= set(rows[0])
    worst = min(rows, key=lambda r: r["snr_db"])
    assert worst["op"] == "CONV_2D" and "node_conv2d_1" in worst["nodes"] and worst["snr_db"] < 15, rows
    assert all(r["snr_db"] > worst["snr_db"] + 15 for r in rows if r is not worst)
    last = [r for r in rows if "node_linear_2" in r["nodes"]]  # the output op: found by its weights' names
    assert last and last[0]["op"] == "FULLY_CONNECTED"
    kept = tflite_layer_statistics(sm, ctx, RESCUE)
    assert not any(set(r["nodes"]) & set(RESCUE) for r in kept) and len(kept) == len(rows) - 3
