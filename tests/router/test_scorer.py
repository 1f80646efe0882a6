"""The request scorer: learns from what the request says, calibrates, serializes, never raises.

Synthetic traffic: ``tests/router/scorer_traffic.py`` (IDE tasks as a real client sends them,
labels drawn per family).
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from loadtests.bench.routing.scorer import bench_request
from router.calibration import Knobs, SegmentPool, plan
from router.config import LearnedConfig
from router.errors import PolicyConfigError
from router.request_text import RequestText
from router.scorer import (
    Example,
    Scorer,
    ScorerConfig,
    auc,
    fit,
    log_loss,
    uncertainty,
)
from router.scorer_features import Featurizer
from tests.router.scorer_traffic import (
    P_LOCAL_SHARP,
    P_OTHER_SHARP,
    frontier_examples,
    heldout_examples,
    synthetic,
    train_examples,
)


@pytest.fixture(scope="module")
def train() -> list[Example]:
    return train_examples()


@pytest.fixture(scope="module")
def scorer(train: list[Example]) -> Scorer:
    return fit(train, "v1", seed=0)


def test_scorer_ranks_held_out_requests_about_as_well_as_the_true_family_rates(
    scorer: Scorer,
) -> None:
    heldout, rates = heldout_examples()
    labels = [e.accepted for e in heldout]
    scores = [scorer.predict_local(e.text) for e in heldout]
    ceiling = auc(rates, labels)
    assert auc(scores, labels) >= ceiling - 0.03, (auc(scores, labels), ceiling)


def test_scorer_reaches_auc_0_9_on_held_out_requests_when_families_allow_it() -> None:
    train, _ = synthetic(1500, 1, "train", P_LOCAL_SHARP, P_OTHER_SHARP)
    heldout, rates = heldout_examples(P_LOCAL_SHARP, P_OTHER_SHARP)
    labels = [e.accepted for e in heldout]
    scorer = fit(train, "sharp", seed=0)
    measured = auc([scorer.predict_local(e.text) for e in heldout], labels)
    assert measured >= 0.9, (measured, auc(rates, labels))


def test_scorer_learns_from_the_instruction_text_not_the_client(scorer: Scorer) -> None:
    heldout, rates = heldout_examples()
    quick = [scorer.predict_local(e.text) for e, p in zip(heldout, rates, strict=True) if p > 0.5]
    beyond = [scorer.predict_local(e.text) for e, p in zip(heldout, rates, strict=True) if p < 0.5]
    assert np.mean(quick) > 0.65 > 0.2 > np.mean(beyond)


def test_calibrated_threshold_meets_the_quality_target_on_held_out_data(scorer: Scorer) -> None:
    # calibrate on one held-out half, check on the other: the routed mix keeps the target
    heldout, _ = synthetic(1000, 2, "heldout")
    front = frontier_examples([e.text for e in heldout], 2)
    calib, check = slice(0, 500), slice(500, 1000)
    target = 0.9

    def routed(part: slice, threshold: float) -> tuple[float, float, float]:
        local = [scorer.predict_local(e.text) >= threshold for e in heldout[part]]
        served = [
            (e.accepted if go else f.accepted)
            for e, f, go in zip(heldout[part], front[part], local, strict=True)
        ]
        frontier_only = np.mean([f.accepted for f in front[part]])
        return float(np.mean(served)), float(frontier_only), float(np.mean(local))

    pool = SegmentPool()
    for e in heldout[calib]:
        pool.add(scorer.predict_local(e.text), e.accepted)
    pool.set_live([scorer.predict_local(e.text) for e in heldout[calib]])
    alone = float(np.mean([f.accepted for f in front[calib]]))
    config = LearnedConfig(
        local_target="local", frontier_target="frontier", quality_target=target, exploration_share=0
    )
    knobs = Knobs.of(config, "plain")
    threshold = plan(pool, alone, knobs).threshold
    mix, alone, share = routed(calib, threshold)
    assert mix >= target * alone
    mix, alone, share = routed(check, threshold)
    assert mix >= target * alone - 0.03, (mix, alone, share)
    assert 0.2 <= share <= 0.75, share  # some quick questions go local, no beyond family does


def test_serialization_round_trips_exactly(scorer: Scorer, train: list[Example]) -> None:
    for model in ("logreg", "naive_bayes"):
        fitted = scorer if model == "logreg" else fit(train, "nb", 0, ScorerConfig(model=model))
        data = json.loads(json.dumps(fitted.to_json()))
        loaded = Scorer.from_json(data)
        assert loaded.version == fitted.version
        assert np.array_equal(loaded.weights, fitted.weights)
        assert loaded.to_json() == fitted.to_json()
        for e in train[:50]:
            assert loaded.predict_local(e.text) == fitted.predict_local(e.text)
            assert loaded.predict_frontier(e.text) == fitted.predict_frontier(e.text)
        assert len(data["weights"]) < fitted.featurizer.dim // 10  # only non-default weights


def test_from_json_rejects_a_malformed_file_with_a_routing_error(scorer: Scorer) -> None:
    good = scorer.to_json()
    for bad in (
        {**good, "format": "switchyard.scorer/0"},
        {**good, "weights": {str(1 << 30): 1.0}},
        {**good, "model": "forest"},
        {**good, "features": {"dim_bits": 18, "colour": "red"}},
        {k: v for k, v in good.items() if k != "bias"},
    ):
        with pytest.raises(PolicyConfigError):
            Scorer.from_json(bad)


def test_empty_huge_and_odd_requests_are_featurized_and_scored(scorer: Scorer) -> None:
    odd = [
        RequestText(),
        RequestText(last_user="   \n\t "),
        RequestText(system="x" * 200_000, last_user="why?", turns=-3, prompt_chars=-1),
        RequestText(last_user="\ud800 héllo wörld 日本語のテキスト 🙂", endpoint="???"),
        RequestText(last_user="a" * 100_000, tool_names=tuple(f"t{i}" for i in range(1000))),
        RequestText(last_user="```", tool_names=("", "\x00"), has_tools=True, turns=10**9),
        RequestText(system="\udfff sys", last_user="\udc80", tool_names=("\ud83d",)),
    ]
    for text in odd:
        p = scorer.predict_local(text)
        assert 0.0 < p < 1.0
        assert 0.0 < scorer.predict_frontier(text) < 1.0


def test_a_huge_prompt_costs_about_what_a_typical_one_costs(scorer: Scorer) -> None:
    typical = bench_request()
    huge = RequestText(last_user=typical.last_user * 5000, system=typical.system * 100)

    def best_us(text: RequestText) -> float:
        runs = []
        for _ in range(20):
            t0 = time.perf_counter()
            scorer.predict_local(text)
            runs.append(time.perf_counter() - t0)
        return min(runs) * 1e6

    assert best_us(huge) < 3 * best_us(typical) + 50


def test_feature_hashes_are_stable_across_processes_and_versions() -> None:
    # CRC-32 indices, not Python's salted hash(): a fitted file scores the same everywhere
    indices, values = Featurizer().featurize(RequestText(last_user="Hello world"))
    assert indices[:3].tolist() == [254001, 114440, 146896]
    assert values[:3].tolist() == pytest.approx([1 / math.sqrt(5)] * 3)


def test_fit_is_deterministic_for_a_seed(train: list[Example], scorer: Scorer) -> None:
    again = fit(train, "v1", seed=0)
    assert again.to_json() == scorer.to_json()
    other = fit(train, "v1", seed=1)
    assert other.to_json() != scorer.to_json()


def test_fit_never_raises_on_degenerate_data() -> None:
    text = RequestText(last_user="hello")
    cases: list[list[Example]] = [
        [],
        [Example(text, True, "frontier")],
        [Example(text, True)] * 3,
        [Example(text, False, weight=0.0)],
        [Example(RequestText(), False)],
    ]
    for model in ("logreg", "naive_bayes"):
        for examples in cases:
            scorer = fit(examples, "x", 0, ScorerConfig(model=model))  # type: ignore[arg-type]
            assert 0.0 < scorer.predict_local(text) < 1.0
            assert Scorer.from_json(scorer.to_json()).to_json() == scorer.to_json()


def test_frontier_estimate_is_the_smoothed_frontier_rate() -> None:
    text = RequestText(last_user="anything")
    examples = [Example(text, True, "frontier")] * 97 + [Example(text, False, "frontier")] * 3
    scorer = fit(examples, "f", 0, ScorerConfig(frontier_prior=0.5, frontier_prior_weight=2))
    assert scorer.predict_frontier(text) == pytest.approx((1 + 97) / (2 + 100))
    assert fit([], "f").predict_frontier(text) == pytest.approx(ScorerConfig().frontier_prior)


def test_uncertainty_is_largest_where_the_scorer_is_least_sure() -> None:
    assert uncertainty(0.5) == 0.25
    assert uncertainty(0.9) == pytest.approx(uncertainty(0.1))
    assert uncertainty(0.0) == uncertainty(1.0) == 0.0


def test_metrics_match_their_definitions() -> None:
    assert auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75
    assert auc([0.5, 0.5], [True, False]) == 0.5
    assert auc([0.3, 0.7], [True, True]) == 0.5
    assert log_loss([0.5, 0.5], [True, False]) == pytest.approx(math.log(2))
