"""The one judge of outputs against thresholds (``metrics.drift.judge``): per output, which bounds are
breached and which are not, with the check's messages; the rules of golden outputs, localize and a
conformance case; a target's worst drift."""
from __future__ import annotations

import numpy as np

from portability.metrics import drift
from portability.metrics.bounds import CHECK, DIVERGENCE, GOLDEN, SPEC

T = {"max_abs": 1e-4, "cosine": 0.9999, "top1_agreement": 1.0, "max_abs_steps": None}


def _scores():
    ref = np.array([[[0.1, 0.9, 0.0], [0.8, 0.1, 0.1]]])
    return ref, ref.copy()


def test_identical_outputs_breach_nothing():
    ref, got = _scores()
    j = drift.judge(T, {"p": ref}, {"p": got})
    assert j.breaches == () and j.agrees and j.agreement == 1.0 and j.outputs["p"]["max_abs"] == 0.0


def test_each_bound_breached_per_output_with_the_checks_messages():
    ref, got = _scores()
    got[0, 1] = [0.1, 0.8, 0.1]  # the second row's class changes
    j = drift.judge(T, {"p": ref, "q": np.ones((1, 4))}, {"p": got, "q": np.ones((1, 4))})
    assert [(b.bound, b.output) for b in j.breaches] == [("max_abs", "p"), ("cosine", "p"), ("top1_agreement", None)]
    assert j.messages[0] == "'p': max_abs 0.7 > 0.0001"
    assert j.messages[1].startswith("'p': cosine 0.") and j.messages[1].endswith(" < 0.9999")
    assert j.messages[2] == "top-1 agreement 0.5000 < 1.0"
    assert not j.agrees
    # the same judgement from the drift already measured, as the check judges a report's metrics
    assert drift.breaches({"outputs": j.outputs, "top1_agreement": j.agreement}, T) == j.messages


def test_a_bound_left_unset_is_not_checked_and_a_looser_one_passes():
    ref, got = _scores()
    got = got + 1e-3
    assert [b.bound for b in drift.judge(T, {"p": ref}, {"p": got}).breaches] == ["max_abs"]
    assert drift.judge({**T, "max_abs": None}, {"p": ref}, {"p": got}).breaches == ()
    assert drift.judge({**T, "max_abs": 1e-2}, {"p": ref}, {"p": got}).agrees


def test_nonfinite_values_per_rule():
    ref = np.array([1.0, np.nan, 3.0])
    same = drift.judge(T, {"y": ref}, {"y": ref.copy()})
    assert [b.bound for b in same.breaches] == ["nonfinite"] and "on both sides" in same.messages[0]
    assert drift.judge(T, {"y": ref}, {"y": ref.copy()}, rule=GOLDEN).breaches == ()
    one_side = np.array([1.0, 2.0, 3.0])
    check = drift.judge(T, {"y": one_side}, {"y": ref})
    assert check.messages == ["'y': 1 NaN/Inf values where the reference has none (or the reverse)"]
    golden = drift.judge(T, {"y": one_side}, {"y": ref}, rule=GOLDEN)
    assert [(b.bound, b.text) for b in golden.breaches] == [("nonfinite", "1 NaN/Inf values appeared or went"),
                                                           ("max_abs", "max_abs inf > 0.0003")]  # 1e-4 * 3


def test_the_bound_scales_with_the_reference_and_divergence_ignores_a_single_values_cosine():
    """Float rounding grows with the values rounded: max_abs is judged per unit of the reference's largest
    magnitude where that is over 1, except against a conformance case's exact expected outputs."""
    ref, got = np.array([1000.0, 2000.0]), np.array([1000.05, 2000.0])
    assert drift.judge(T, {"t": ref}, {"t": got}, rule=SPEC).breaches  # 0.05 > 1e-4
    for rule in (CHECK, GOLDEN, DIVERGENCE):
        j = drift.judge(T, {"t": ref}, {"t": got}, rule=rule)
        assert j.breaches == () and j.outputs["t"]["ref_max_abs"] == 2000.0  # 0.05 < 1e-4 * 2000
        assert drift.judge(T, {"t": ref}, {"t": ref + 0.5}, rule=rule).breaches
    small = np.array([0.1, 0.5])  # under 1 the bound is the threshold itself
    assert [b.limit for b in drift.judge(T, {"t": small}, {"t": small + 2e-4}).breaches] == [1e-4]
    flipped = (np.array([2.0]), np.array([-2.0]))
    assert [b.bound for b in drift.judge({"cosine": 0.9}, {"t": flipped[0]}, {"t": flipped[1]}).breaches] == ["cosine"]
    assert drift.judge({"cosine": 0.9}, {"t": flipped[0]}, {"t": flipped[1]}, rule=DIVERGENCE).breaches == ()


def test_a_tolerance_agrees_over_every_output_whatever_the_thresholds():
    ref = {"a": np.array([[1.0, 2.0]]), "b": np.array([[5.0, np.nan]])}
    got = {"a": np.array([[1.0005, 2.0]]), "b": np.array([[5.0, np.nan]])}
    j = drift.judge(T, ref, got, rule=SPEC, tolerance=(1e-3, 1e-7))
    assert j.breaches and j.within_tolerance and j.agrees and abs(j.tolerance_max_abs - 0.0005) < 1e-9
    j = drift.judge(T, ref, got, rule=SPEC, tolerance=(1e-6, 1e-7))
    assert not j.within_tolerance and not j.agrees
    ref, got = _scores()  # the spec's cases judge no top-1 agreement
    assert all(b.output == "p" for b in drift.judge(T, {"p": ref}, {"p": got[:, :, ::-1]}, rule=SPEC).breaches)


def test_structural_problems_are_not_agreement():
    j = drift.judge(T, {"y": np.zeros((1, 3))}, {})
    assert j.problems == ("output 'y' is missing",) and j.breaches == () and not j.agrees


def test_the_worst_of_a_target():
    metrics = {"outputs": {"a": {"max_abs": 0.5, "cosine": 0.9}, "b": {"max_abs": "inf", "cosine": 0.0}},
               "top1_agreement": 0.75}
    assert drift.worst(metrics, "numbers") == (0.5, 0.0)
    assert drift.worst({"outputs": {"a": {"max_abs": float("inf"), "cosine": 0.0}}}, "finite") == (None, 0.0)
    assert drift.worst({"outputs": {"a": {"max_abs": 2e-5, "cosine": 1.0}}}) == (2e-5, 1.0)
    assert drift.worst({}) == (None, None) and drift.agreement(metrics) == 0.75


def test_a_decoders_logits_get_top1_at_every_position_and_a_hidden_state_none():
    """``logits [batch, sequence, vocab]`` (stacked by input batch: rank 4) is scores over its last axis at each
    position; a hidden state of the same rank is not scores."""
    import numpy as np

    from portability.metrics import drift

    ref = np.random.default_rng(0).standard_normal((2, 1, 8, 50)).astype(np.float32)
    got = ref.copy()
    got[0, 0, 3] = -got[0, 0, 3]  # one position's argmax moves
    per, agreement, problems = drift.compare({"logits": ref}, {"logits": got})
    assert agreement == 15 / 16 and per["logits"]["top1_agreement"] == 15 / 16 and not problems
    per, agreement, _ = drift.compare({"last_hidden_state": ref}, {"last_hidden_state": got})
    assert agreement is None and "top1_agreement" not in per["last_hidden_state"]
    # a segmentation head's logits [batch, classes, height, width]: the last axis is no class axis
    seg = np.random.default_rng(1).standard_normal((2, 1, 5, 4, 4)).astype(np.float32)
    assert drift.compare({"logits": seg}, {"logits": seg})[1] is None
