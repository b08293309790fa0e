"""The converter graph plans each target's chain: ONNX sources get exactly the chains the targets had
when they were written by hand (tests/golden/onnx_chains.json), other sources the native route, and
``--via`` forces a hub."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT
from portability.core.errors import UsageError
from portability.engine.plan import NoRoute, for_check, plan
from portability.targets import registry

REG = registry()
GOLDEN = json.loads((ROOT / "tests" / "golden" / "onnx_chains.json").read_text())


def names(tid: str, source: str, via: str | None = None) -> list[str]:
    return [p.rsplit(":", 1)[1] + (f"{o}" if o else "") for p, o in plan(source, REG[tid], via).steps]


@pytest.mark.parametrize("tid", sorted(GOLDEN))
def test_onnx_chains_are_the_hand_written_ones(tid):
    got = [[p, o] for p, o in plan("onnx", REG[tid]).steps]
    assert got == GOLDEN[tid]


def test_keras_takes_the_native_routes():
    assert names("mobile/tflite-fp16", "keras") == ["KerasFromKeras", "SavedModelFromKeras", "TfliteFromSavedModel{'quant': 'fp16'}"]
    assert names("mobile/tflite-int8", "keras") == ["KerasFromKeras", "SavedModelFromKeras", "Int8TfliteFromSavedModel"]
    assert names("web/tfjs-wasm", "keras") == ["KerasFromKeras", "SavedModelFromKeras", "TfjsFromSavedModel"]
    assert names("server/ort-cpu", "keras") == ["KerasFromKeras", "SavedModelFromKeras", "OnnxFromSavedModel"]
    assert names("mobile/ort-mobile", "keras") == ["KerasFromKeras", "SavedModelFromKeras", "OnnxFromSavedModel", "OrtFromOnnx"]
    assert names("server/keras", "keras") == ["KerasFromKeras"]
    assert names("mobile/tflite-fp32", "saved_model") == ["SavedModelFromSavedModel", "TfliteFromSavedModel{'quant': 'fp32'}"]


def test_via_onnx_routes_through_onnx():
    assert names("mobile/tflite-fp16", "keras", via="onnx") == [
        "KerasFromKeras", "SavedModelFromKeras", "OnnxFromSavedModel", "SavedModelFromOnnx", "TfliteFromSavedModel{'quant': 'fp16'}"]
    assert plan("keras", REG["web/tfjs-cpu"], via="onnx").route == ("keras", "saved_model", "onnx", "saved_model", "tfjs")
    # a route that already passes the hub is unchanged
    assert names("server/ort-cpu", "keras", via="onnx") == names("server/ort-cpu", "keras")


def test_torch_exports_with_dynamo_unless_told():
    assert names("server/ort-cpu", "torch") == ["TorchFromTorch", "OnnxFromTorch"]
    # float32 TFLite: PyTorch's native converter (litert-torch); --via onnx takes torch.onnx and onnx2tf;
    # the variants litert-torch does not make go through ONNX
    assert names("mobile/tflite-fp32", "torch") == ["TorchFromTorch", "TfliteFromTorch"]
    assert names("mobile/tflite-fp32", "torch", via="onnx")[:3] == ["TorchFromTorch", "OnnxFromTorch", "SavedModelFromOnnx"]
    assert names("mobile/tflite-int8", "torch")[:3] == ["TorchFromTorch", "OnnxFromTorch", "SavedModelFromOnnx"]
    assert names("server/ort-cpu", "torch", via="OnnxFromTorchScript") == ["TorchFromTorch", "OnnxFromTorchScript"]


def test_a_source_in_the_runtimes_format_runs_as_given_for_the_default_variant_only():
    assert names("mobile/tflite-fp32", "tflite") == ["TfliteFromTflite"]
    assert names("web/litert-js", "tflite") == ["TfliteFromTflite"]
    assert names("web/tfjs-webgl", "tfjs") == ["TfjsFromTfjs"]
    for tid in ("mobile/tflite-fp16", "mobile/tflite-int8", "server/ort-cpu"):
        with pytest.raises(NoRoute, match="no converter route from tflite"):
            plan("tflite", REG[tid])


def test_a_runtime_that_reads_several_formats_takes_the_nearest_and_never_a_quantizer_unasked():
    """OpenVINO reads ONNX and .tflite itself: a source in either runs as given, others take the shortest
    route to one of them; a target that names no variant is never reached through a quantizer (the int8
    .tflite, the dynamic int8 ONNX) — those make only the variants their targets ask for."""
    assert names("server/openvino", "onnx") == ["OnnxFromOnnx"]
    assert names("server/openvino", "tflite") == ["TfliteFromTflite"]
    assert names("server/openvino", "torch") == ["TorchFromTorch", "OnnxFromTorch"]
    assert names("server/openvino", "keras") in (["KerasFromKeras", "SavedModelFromKeras", "OnnxFromSavedModel"],
                                                 ["KerasFromKeras", "SavedModelFromKeras", "TfliteFromSavedModel{'quant': 'fp32'}"])
    assert names("server/ort-qdq", "onnx") == ["OnnxFromOnnx", "QdqInt8FromOnnx"]
    assert names("server/ort-fp16", "torch") == ["TorchFromTorch", "OnnxFromTorch", "Fp16FromOnnx"]
    with pytest.raises(NoRoute, match="no converter route from tflite to onnx|tflite"):
        plan("tflite", REG["server/ort-int8"])


def test_for_check_puts_the_sources_reference_first_and_leaves_out_other_sources_runtimes():
    targets, no_route, records = for_check("onnx", "server")
    ids = [t.id for t in targets]
    assert ids[0] == "server/ort-cpu" and "server/keras" not in ids and "server/torch" not in ids
    assert records == {}  # an ONNX source's report is what it was
    targets, no_route, _ = for_check("onnx", "server/torch")
    assert [t.id for t in targets] == ["server/ort-cpu", "server/torch"] and "server/torch" in no_route
    targets, no_route, records = for_check("tflite", "mobile,web/litert-js")
    assert targets[0].id == "mobile/tflite-fp32" and "mobile/tflite-int8" in no_route
    assert records["web/litert-js"] == {"route": ["tflite"], "steps": ["TfliteFromTflite"], "via": None}
    targets, _, records = for_check("keras", "server", via="onnx")
    assert targets[0].id == "server/keras" and records["server/keras"]["via"] is None  # the reference is never routed
    assert records["server/tf"]["route"] == ["keras", "saved_model", "onnx", "saved_model"]


def test_an_unknown_via_names_what_exists():
    with pytest.raises(UsageError, match="neither a format.*onnx.*nor a converter.*OnnxFromTorchScript"):
        for_check("keras", "server", via="onnnx")
