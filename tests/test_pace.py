"""Chunked timing: the median-stability criterion, the chunk sizes within the runs and the time budget,
and the worker's loop over a runtime's ``time`` calls."""
import numpy as np
import pytest

from portability.metrics.latency import (FIRST_CHUNK, MIN_STABLE_RUNS, TimingPlan, first_chunk, median_half_width,
                                         median_stable, next_chunk, summarize)
from portability.workers.worker import _time_chunks


def _noisy(n, sigma, seed=0, median=2.0):
    return list(median * np.exp(np.random.default_rng(seed).normal(0.0, sigma, n)))


def test_half_width_uses_the_order_statistics_of_the_median():
    # n = 10: ranks round(5 - 3.1) = 2 and round(6 + 3.1) = 9 (1-based) of 1..10, median 5.5
    assert median_half_width(list(range(10, 0, -1))) == pytest.approx((9 - 2) / 2 / 5.5)
    # n = 50: ranks 18 and 33
    assert median_half_width(list(range(1, 51))) == pytest.approx((33 - 18) / 2 / 25.5)
    # few samples: the ranks are clipped to the extremes
    assert median_half_width([1.0, 1.0, 1.0, 1.0, 3.0]) == pytest.approx(1.0)
    assert median_half_width([]) == float("inf") and median_half_width([0.0, 0.0]) == float("inf")


def test_stable_samples_stop_after_the_first_chunk():
    s = _noisy(FIRST_CHUNK, 0.01)
    assert median_stable(s)
    assert next_chunk(s, FIRST_CHUNK, 50, 20.0, 5.0) == (0, "stable")


def test_noisy_samples_go_on_with_a_doubling_chunk():
    s = _noisy(FIRST_CHUNK, 0.5)
    assert not median_stable(s)
    assert next_chunk(s, 10, 50, 20.0, 5.0) == (10, None)
    s = _noisy(20, 0.5, seed=1)
    assert next_chunk(s, 20, 50, 20.0, 5.0) == (20, None)
    assert next_chunk(_noisy(40, 0.5, seed=2), 40, 50, None, 5.0) == (10, None)  # what remains of the runs


def test_too_few_runs_are_never_stable():
    assert not median_stable([1.0] * (MIN_STABLE_RUNS - 1))
    assert median_stable([1.0] * MIN_STABLE_RUNS)
    # a target allowed fewer runs than that stops when they are taken
    assert next_chunk([1.0, 1.0], 2, 2, 20.0, 1.0) == (0, "runs")


def test_the_runs_and_the_budget_bound_the_chunks():
    noisy = _noisy(30, 0.5, seed=3)
    assert next_chunk(noisy, 50, 50, 20.0, 10.0) == (0, "runs")
    assert next_chunk(noisy, 16, 16, 20.0, 10.0, budget_cut=True) == (0, "budget")  # the budget set the runs
    slow = [s * 500 for s in noisy[:10]]  # ~1 s per run
    pace = float(np.mean(slow))
    assert next_chunk(slow, 10, 50, 20.0, 20e3 - 3.5 * pace) == (3, None)  # three more runs fit
    assert next_chunk(slow, 10, 50, 20.0, 20e3 - 0.5 * pace) == (0, "budget")
    assert next_chunk(slow, 10, 50, None, 1e9) == (10, None)  # no budget: no time bound


def test_first_chunk_respects_min_runs_and_the_maximum():
    assert first_chunk(50, 5) == FIRST_CHUNK
    assert first_chunk(50, 0) == FIRST_CHUNK
    assert first_chunk(50, 25) == 25
    assert first_chunk(3, 5) == 3
    assert first_chunk(0, 5) == 0


class _Runtime:
    """Draws each run's milliseconds from a log-normal distribution; records every ``time`` call."""

    def __init__(self, sigma, seed=0):
        self.rng, self.sigma, self.calls = np.random.default_rng(seed), sigma, []

    def time(self, feeds, warmup, runs):
        self.calls.append((warmup, runs))
        return list(2.0 * np.exp(self.rng.normal(0.0, self.sigma, runs)))


def test_worker_times_in_chunks_and_only_the_first_warms_up():
    quiet = _Runtime(0.01)
    ms, stopped = _time_chunks(quiet, {}, TimingPlan(10, 50), 5, 20.0)
    assert (stopped, quiet.calls, len(ms)) == ("stable", [(10, 10)], 10)

    noisy = _Runtime(0.6)
    ms, stopped = _time_chunks(noisy, {}, TimingPlan(10, 50), 5, 20.0)
    assert noisy.calls == [(10, 10), (0, 10), (0, 20), (0, 10)] and len(ms) == 50 and stopped == "runs"
    assert summarize({"samples": ms, "stopped": stopped})["runs"] == 50

    cut = _Runtime(0.6)
    _, stopped = _time_chunks(cut, {}, TimingPlan(2, 16, asked=50, budget_s=20.0, per_run_ms=1e3), 5, 20.0)
    assert stopped == "budget" and sum(r for _, r in cut.calls) <= 16


def test_a_stable_median_is_close_to_the_true_one():
    """Over many simulated timings (log-normal, 10% spread, true median 2 ms), those that stop as stable
    have a p50 within 5% of the true median nearly always."""
    hits = stable = 0
    for seed in range(200):
        rt = _Runtime(0.1, seed=seed)
        ms, stopped = _time_chunks(rt, {}, TimingPlan(0, 200), 5, None)
        if stopped == "stable":
            stable += 1
            hits += abs(np.median(ms) / 2.0 - 1) <= 0.05
    assert stable >= 150 and hits >= 0.9 * stable


def test_a_real_target_compares_the_batches_that_fit_the_checks_sample_budget(tmp_path):
    """A target of no budget of its own (20 ms an inference, a real CPU) follows ``--sample-budget``: at 50 ms
    the second inference sets the pace and two of the eight batches fit; at 10 ms the first alone overran it,
    so it is the one batch compared (no second to learn the pace); 0 compares every batch. Each against the
    reference's same batches."""
    from conftest import FIXTURES, by_id, check_json

    def check(budget: str) -> dict:
        r = check_json(tmp_path, FIXTURES / "lenet.onnx", "--targets", "test/ort-cpu-slow", "--runs", "0",
                       "--sample-budget", budget, env={"PORTABILITY_PLUGINS": "doubles"})
        t = by_id(r)["test/ort-cpu-slow"]
        assert t["status"] == "pass", t
        return t["details"].get("samples")

    paced = check("0.05")
    assert (paced["batches"], paced["of"], paced["budget_s"]) == (2, 8, 0.05) and paced["pace_ms"] >= 20
    first = check("0.01")
    assert first["batches"] == 1 and first["first_ms"] >= 20 and first["pace_ms"] == first["first_ms"]
    assert check("0") is None
