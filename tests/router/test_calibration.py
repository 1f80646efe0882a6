"""The learned policy's threshold: lower bounds, learn-then-test, the live mix, exploration."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from router.calibration import Knobs, Segment, SegmentPool, kish_n, plan, wilson_bounds
from router.config import LearnedConfig

Z95 = 1.959964


def _pool(
    scores: list[float], accepted: list[bool], live: list[float] | None = None
) -> SegmentPool:
    pool = SegmentPool()
    for s, a in zip(scores, accepted, strict=True):
        pool.add(s, a)
    if live is not None:
        pool.set_live(live)
    return pool


def _knobs(q: float, eps: float = 0.0, segment: Segment = "plain") -> Knobs:
    """The config's defaults but the quality target, the exploration share and 5 samples."""
    config = LearnedConfig(
        local_target="local",
        frontier_target="frontier",
        quality_target=q,
        exploration_share=eps,
        min_samples=5,
    )
    return Knobs.of(config, segment)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I
    [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_bounds_match_the_published_intervals(
    k: int, n: int, low: float, high: float
) -> None:
    lo, hi = wilson_bounds(k / n, n, Z95)
    assert (round(lo, 4), round(hi, 4)) == (low, high)


def test_kish_effective_sample_size() -> None:
    assert kish_n(np.ones(40)) == pytest.approx(40)
    assert kish_n(np.array([20.0] + [1.0] * 19)) == pytest.approx(39**2 / 419)
    assert kish_n(np.zeros(3)) == 0.0
    assert wilson_bounds(0.5, 0, Z95) == (0.0, 1.0)


def test_the_marginal_request_must_keep_the_quality_target_on_its_own() -> None:
    scores = [0.99 - i * 0.01 for i in range(20)] + [0.5 - i * 0.01 for i in range(10)]
    accepted = [True] * 20 + [False] * 10
    cut = plan(_pool(scores, accepted), 1.0, _knobs(0.6)).threshold
    assert 0.5 < cut < 0.8  # the cut stops where the failing requests begin
    # one miss among good requests does not stop the cut (isotonic pooling: 12 of 13 there)
    noisy = [True] * 12 + [False] + [True] * 7 + [False] * 10
    assert 0.5 < plan(_pool(scores, noisy), 1.0, _knobs(0.6)).threshold < 0.8


def test_thin_evidence_sends_nothing_local_where_the_point_estimate_would() -> None:
    # half the live mix scores 0.9; its verdicts pass 5 of 5 (point estimate 1.0 >= 0.95)
    live = [0.9] * 50 + [0.1] * 50
    thin = plan(_pool([0.9] * 5 + [0.1] * 5, [True] * 5 + [False] * 5, live), 0.97, _knobs(0.95))
    assert thin.threshold == math.inf and thin.local_share == 0.0
    many = [0.9] * 200 + [0.1] * 50
    ample = plan(_pool(many, [True] * 200 + [False] * 50, live), 0.97, _knobs(0.95))
    assert ample.threshold == pytest.approx(0.5) and ample.local_share == pytest.approx(0.5)
    # the lower bound it went local on: 200 of 200 (Wilson at 95% one-sided) on half the mix
    lower = wilson_bounds(1.0, 200, _knobs(0.95).z)[0]
    assert ample.routed_lower == pytest.approx(0.5 * lower + 0.5 * 0.97)


def test_the_scan_stops_at_the_first_failing_cut() -> None:
    # top block: 10 verdicts, 6 pass (fails as soon as it holds a large live share); below it
    # 300 passes that alone would clear the target: fixed-sequence testing never reaches them
    scores = [0.95] * 10 + [0.9] * 300
    accepted = [True] * 6 + [False] * 4 + [True] * 300
    live = [0.95] * 60 + [0.9] * 40
    assert plan(_pool(scores, accepted, live), 1.0, _knobs(0.95)).threshold == math.inf
    # the same verdicts with the top block a small live share: the scan goes on, both local
    live_small = [0.95] * 2 + [0.9] * 98
    both = plan(_pool(scores, accepted, live_small), 1.0, _knobs(0.95))
    assert both.threshold == 0.9 and both.local_share == 1.0


def test_the_pool_is_reweighted_to_the_live_mix() -> None:
    # pool: 75% low-scoring verdicts; live: 75% high-scoring requests
    pool = _pool([0.9] * 25 + [0.1] * 75, [True] * 100, [0.9] * 75 + [0.1] * 25)
    w = pool.weights(10)
    high = float(w[:25].sum() / w.sum())
    assert high == pytest.approx(0.75)
    assert w.sum() == pytest.approx(100)
    # without live scores the pool is its own mix
    assert np.allclose(_pool([0.9, 0.1], [True, True]).weights(10), 1.0)


def test_a_verdict_weighs_one_over_the_chance_it_was_observed() -> None:
    pool = SegmentPool()
    pool.add(0.2, False, propensity=0.05)  # an exploration answer
    pool.add(0.2, True, propensity=0.25)  # a shadow sampled at 25%
    pool.add(0.9, True)  # sent local by score
    assert pool.weights(1).tolist() == pytest.approx([20.0, 4.0, 1.0])
    again = SegmentPool.from_json(pool.to_json())
    assert again.weights(1).tolist() == pytest.approx([20.0, 4.0, 1.0])
    # trimmed at twice the median (4): the explored answer weighs 8, not 20
    assert pool.weights(1, max_ratio=2).tolist() == pytest.approx([8.0, 4.0, 1.0])


def test_exploration_is_capped_by_its_measured_harm_and_counted_in_the_budget() -> None:
    # the local model fails everything: 5% exploration would cost 0.05 x 0.97, all the budget
    bad = _pool([0.1] * 400, [False] * 400)
    cut = plan(bad, 0.97, _knobs(0.95, eps=0.05))
    assert cut.threshold == math.inf
    assert cut.exploration_share == pytest.approx(0.5 * 0.05 * 0.97 / 0.97)
    assert cut.routed_lower >= 0.95 * 0.97
    # a local model as good as the frontier below the cut: exploration costs nothing
    good = _pool([0.1] * 400, [True] * 400)
    assert plan(good, 0.97, _knobs(0.95, eps=0.05)).exploration_share == 0.05


def test_an_unproven_segment_explores_only_where_allowed() -> None:
    empty = SegmentPool()
    # no verdicts: the harm is bounded by the worst (all rejected), so half the budget buys
    # 0.5 x (1 - 0.95) of exploration, not the configured 5%
    unproven = plan(empty, 0.97, _knobs(0.95, eps=0.05))
    assert unproven.exploration_share == pytest.approx(0.025)
    assert unproven.routed_lower == pytest.approx(0.97 * (1 - 0.025))
    assert plan(empty, 0.97, _knobs(0.95, eps=0.01)).exploration_share == 0.01
    tools = _knobs(0.95, eps=0.05, segment="tools")
    assert plan(empty, 0.97, tools).exploration_share == 0.0


def test_false_local_routing_stays_within_the_error_rate() -> None:
    # a family truly at 0.85 (under 0.95 x 1.0) is 40% of the mix; 30 verdicts of it per draw:
    # a point estimate sends it local whenever it reads 29/30 or better; the test rarely does
    rng = random.Random(7)
    live = [0.8] * 40 + [0.2] * 60
    wrong = 0
    draws = 300
    for _ in range(draws):
        verdicts = [rng.random() < 0.85 for _ in range(30)] + [False] * 30
        cut = plan(_pool([0.8] * 30 + [0.2] * 30, verdicts, live), 1.0, _knobs(0.95))
        wrong += cut.threshold <= 0.8
    assert wrong / draws <= 0.05


def test_a_quality_window_keeps_the_target_in_each_window_not_only_on_average() -> None:
    f, q, window = 0.98, 0.95, 500
    knobs = dataclasses.replace(_knobs(q, eps=0.05), window=window)
    spread = math.sqrt(f * (1 - f) / window)
    assert knobs.goal(f) == pytest.approx(q * f + knobs.z * spread)
    assert _knobs(q).goal(f) == pytest.approx(q * f)
    assert dataclasses.replace(knobs, window=1).goal(f) == f  # never above the frontier's
    # a hopeless local model: exploration spends half of what the window leaves, not of 5%
    bad = _pool([0.1] * 400, [False] * 400)
    cut = plan(bad, f, knobs)
    assert cut.exploration_share == pytest.approx(0.5 * (f - knobs.goal(f)) / f)
    # a windowed mix of 500 routed requests at the planned rate keeps q f in >= 95% of windows
    rng = random.Random(3)
    rate = cut.routed_lower
    kept = sum(
        sum(rng.random() < rate for _ in range(window)) / window >= q * f for _ in range(400)
    )
    assert kept / 400 >= 0.93
    # the threshold needs more evidence with a window than without
    scores = [i / 100 for i in range(100)]
    accepted = [s > 0.3 or i % 3 == 0 for i, s in enumerate(scores)]
    pool = _pool(scores, accepted)
    assert plan(pool, f, knobs).threshold >= plan(pool, f, _knobs(q, eps=0.05)).threshold
