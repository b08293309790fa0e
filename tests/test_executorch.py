"""ExecuTorch, PyTorch's own mobile runtime: a .pt2 lowered to the XNNPACK delegate and to the portable
kernels alone, both run in ExecuTorch's runtime against eager PyTorch; a disagreement between the two is
named as the delegate's."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import FIXTURES, by_id, check_json
from portability.engine.plan import for_check
from portability.engine.verdict import delegate_ab
from portability.targets import registry

ET = ["mobile/executorch-xnnpack", "mobile/executorch-portable"]


def test_both_executorch_programs_run_and_agree_with_eager_pytorch(tmp_path):
    r = check_json(tmp_path, FIXTURES / "torch_cnn.pt2", "--targets", ",".join(ET))
    t = by_id(r)
    assert r["reference"] == "server/torch"
    for tid, delegated in (("mobile/executorch-xnnpack", {"XnnpackBackend"}), ("mobile/executorch-portable", set())):
        x = t[tid]
        assert x["status"] == "pass", (tid, x.get("error"), x.get("breaches"))
        assert set(x["details"]["delegated"]) == delegated and x["artifact"]["format"] == "pte"
        assert x["runtime"].startswith("executorch 1.5")
        assert [c["converter"].split()[0] for c in x["details"]["conversions"]] == ["TorchFromTorch", "PteFromTorch"]
        (out,) = x["metrics"]["outputs"].values()
        assert out["max_abs"] < 1e-4 and out["cosine"] > 0.999999
    assert not [n for n in r["notes"] if "delegate A/B" in n]


def test_executorch_targets_belong_to_pytorch_sources():
    for source in ("onnx", "keras", "tflite"):
        assert not {t.id for t in for_check(source, "mobile")[0]} & set(ET), source
    assert set(ET) <= {t.id for t in for_check("torch", "mobile")[0]}


@pytest.mark.parametrize("xnn,portable,named", [("drift", "pass", "mobile/executorch-xnnpack (xnnpack) drifts"),
                                                ("pass", "drift", "mobile/executorch-portable (portable) drifts"),
                                                ("drift", "drift", None), ("pass", "pass", None)])
def test_a_delegate_ab_that_disagrees_names_the_delegate(xnn, portable, named):
    reg = registry()
    results = [SimpleNamespace(id=ET[0], status=xnn), SimpleNamespace(id=ET[1], status=portable)]
    notes = delegate_ab(results, [reg[ET[0]], reg[ET[1]], reg["mobile/tflite-fp32"]])
    assert (notes[0].startswith(f"delegate A/B: {named}") if named else notes == []), notes
