"""The request scorer: learns from what the request says, calibrates, serializes, never raises.

Synthetic traffic: tasks from ``loadtests.tasks`` as a real client sends them (one fixed system
prompt for every family, no ``# task:`` marker line, half of them with an agent's tool list), so
only the user's text tells the families apart. "Local accepted" is drawn per family with a seeded
RNG; the frontier is accepted 97% of the time.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Mapping, Sequence
from functools import cache

import numpy as np
import pytest

from loadtests.tasks import Task, sample_tasks
from router.errors import PolicyConfigError
from router.request_text import RequestText
from router.scorer import (
    Example,
    Scorer,
    ScorerConfig,
    auc,
    calibrate_threshold,
    fit,
    log_loss,
    uncertainty,
)
from router.scorer_bench import bench_request, bench_scorer, compare_models
from router.scorer_features import Featurizer

SYSTEM = (
    "You are a coding assistant inside the user's IDE. Each request shows the file the user is "
    "editing and one instruction. Do exactly what the instruction asks."
)
AGENT_TOOLS = ("read_file", "list_dir", "search", "apply_patch", "run_tests")
P_FRONTIER = 0.97
# the brief's rates: even the true per-family probabilities rank held-out labels at AUC ~0.85
P_LOCAL: Mapping[str, float] = {"expression_type": 0.9, "return_type": 0.8, "exception_type": 0.7}
P_OTHER = 0.05
# rates separated enough for a ranking above 0.9 to exist (true probabilities: ~0.93)
P_LOCAL_SHARP: Mapping[str, float] = {
    "expression_type": 0.97,
    "return_type": 0.93,
    "exception_type": 0.9,
}
P_OTHER_SHARP = 0.03


def request_text(task: Task, agent: bool) -> RequestText:
    """What a gateway fills from the task's chat messages: a fixed system prompt, no marker."""
    user = str(task.messages()[-1]["content"])
    if user.startswith("# task: "):
        user = user.split("\n", 1)[1] if "\n" in user else ""
    tools = AGENT_TOOLS if agent else ()
    return RequestText(
        system=SYSTEM,
        last_user=user,
        turns=2,
        tool_names=tools,
        prompt_chars=len(SYSTEM) + len(user),
        has_tools=agent,
    )


@cache
def _tasks(n: int, seed: int, split: str) -> tuple[tuple[Task, RequestText], ...]:
    rng = random.Random(f"client:{seed}:{split}")
    tasks = sample_tasks(n, seed, split)  # type: ignore[arg-type]
    return tuple((t, request_text(t, rng.random() < 0.5)) for t in tasks)


def synthetic(
    n: int,
    seed: int,
    split: str,
    p_local: Mapping[str, float] = P_LOCAL,
    p_other: float = P_OTHER,
) -> tuple[list[Example], list[float]]:
    """Local-arm examples with labels drawn at each family's rate, and those true rates."""
    rng = random.Random(f"labels:{seed}:{split}:{sorted(p_local.items())}:{p_other}")
    examples, rates = [], []
    for task, text in _tasks(n, seed, split):
        p = p_local.get(task.family, p_other)
        examples.append(Example(text, rng.random() < p, "local"))
        rates.append(p)
    return examples, rates


def frontier_examples(texts: Sequence[RequestText], seed: int) -> list[Example]:
    rng = random.Random(f"frontier:{seed}")
    return [Example(t, rng.random() < P_FRONTIER, "frontier") for t in texts]


@pytest.fixture(scope="module")
def train() -> list[Example]:
    examples, _ = synthetic(1500, 1, "train")
    return examples + frontier_examples([e.text for e in examples[:300]], 1)


@pytest.fixture(scope="module")
def scorer(train: list[Example]) -> Scorer:
    return fit(train, "v1", seed=0)


def _heldout(
    p_local: Mapping[str, float] = P_LOCAL, p_other: float = P_OTHER
) -> tuple[list[Example], list[float]]:
    return synthetic(500, 2, "heldout", p_local, p_other)


def test_scorer_ranks_held_out_requests_about_as_well_as_the_true_family_rates(
    scorer: Scorer,
) -> None:
    heldout, rates = _heldout()
    labels = [e.accepted for e in heldout]
    scores = [scorer.predict_local(e.text) for e in heldout]
    ceiling = auc(rates, labels)
    assert auc(scores, labels) >= ceiling - 0.03, (auc(scores, labels), ceiling)


def test_scorer_reaches_auc_0_9_on_held_out_requests_when_families_allow_it() -> None:
    train, _ = synthetic(1500, 1, "train", P_LOCAL_SHARP, P_OTHER_SHARP)
    heldout, rates = _heldout(P_LOCAL_SHARP, P_OTHER_SHARP)
    labels = [e.accepted for e in heldout]
    scorer = fit(train, "sharp", seed=0)
    measured = auc([scorer.predict_local(e.text) for e in heldout], labels)
    assert measured >= 0.9, (measured, auc(rates, labels))


def test_scorer_beats_a_constant_predictor_and_naive_bayes_on_log_loss(
    train: list[Example],
) -> None:
    heldout, _ = _heldout()
    rows = {row["model"]: row for row in compare_models(train, heldout, seed=0)}
    assert set(rows) == {"logreg", "naive_bayes", "constant"}
    assert rows["logreg"]["log_loss"] < rows["constant"]["log_loss"] - 0.1
    assert rows["logreg"]["auc"] > 0.75
    assert rows["logreg"]["log_loss"] < rows["naive_bayes"]["log_loss"]


def test_scorer_learns_from_the_instruction_text_not_the_client(scorer: Scorer) -> None:
    heldout, rates = _heldout()
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

    scores = [scorer.predict_local(e.text) for e in heldout[calib]]
    threshold = calibrate_threshold(
        scores,
        [e.accepted for e in heldout[calib]],
        [float(f.accepted) for f in front[calib]],
        target,
    )
    mix, alone, share = routed(calib, threshold)
    assert mix >= target * alone
    mix, alone, share = routed(check, threshold)
    assert mix >= target * alone - 0.03, (mix, alone, share)
    assert 0.2 <= share <= 0.75, share  # some quick questions go local, no beyond family does


def test_calibrate_threshold_picks_the_largest_local_share_meeting_the_target() -> None:
    scores = [0.9, 0.8, 0.8, 0.5, 0.1]
    accepted = [True, True, False, True, False]
    # frontier 1.0: target 0.8 allows one local miss among five requests
    # midway between the lowest score sent local (0.5) and the first kept back (0.1)
    assert calibrate_threshold(scores, accepted, 1.0, 0.8) == pytest.approx(0.3)
    # target 0.9: the tied 0.8 pair holds the miss, so only the top request goes local
    assert calibrate_threshold(scores, accepted, 1.0, 0.9) == pytest.approx(0.85)
    assert calibrate_threshold(scores, accepted, 1.0, 1.5) == math.inf
    assert calibrate_threshold([], [], 0.97, 0.95) == math.inf
    assert calibrate_threshold(scores, [True] * 5, [0.9] * 5, 1.0) == 0.1
    with pytest.raises(ValueError):
        calibrate_threshold(scores, accepted[:3], 1.0, 0.9)


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


def test_bench_scorer_reports_request_path_cost_and_size() -> None:
    result = bench_scorer(300)
    assert result["predict_p50_us"] > 0
    assert result["predict_p99_us"] >= result["predict_p50_us"]
    assert result["model_bytes"] == 4 * 2**18
    assert 1400 < result["user_chars"] < 2000


def test_the_marginal_request_must_keep_the_quality_target_on_its_own() -> None:
    scores = [0.99 - i * 0.01 for i in range(20)] + [0.5 - i * 0.01 for i in range(10)]
    accepted = [True] * 20 + [False] * 10
    mix_only = calibrate_threshold(scores, accepted, 1.0, 0.9)
    assert mix_only < 0.5  # a tenth of loss allowed: three failing requests go local
    marginal = calibrate_threshold(scores, accepted, 1.0, 0.9, marginal=True)
    assert 0.5 < marginal < 0.8  # the cut stops where the failing requests begin
    # one miss among good requests does not stop the cut (isotonic pooling: 7 of 8 there)
    noisy = [True] * 12 + [False] + [True] * 7 + [False] * 10
    assert calibrate_threshold(scores, noisy, 1.0, 0.8) < 0.5
    assert 0.5 < calibrate_threshold(scores, noisy, 1.0, 0.8, marginal=True) < 0.8
