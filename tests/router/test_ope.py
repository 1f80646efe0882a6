"""Off-policy estimates: the formulas on rows computed by hand, and on simulated logs whose true
value is known, unbiased with 95% intervals that cover it about 95% of the time."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from router.config import RoutingConfig
from router.features import RequestFeatures
from router.ope import (
    Z95,
    Estimate,
    Logged,
    cross_fit,
    doubly_robust,
    ips,
    mean_rate_model,
    off_policy,
    score_rate_model,
    snips,
)
from router.policy import RulePolicy
from router.replay import Arm, ReplayItem

# Two kinds of request; the local model is good at the first only. Accept probabilities:
ACCEPT = {("easy", True): 0.9, ("easy", False): 0.95, ("hard", True): 0.2, ("hard", False): 0.9}
EXPLORE = 0.1  # the logging policy sends hard requests local with this probability


def test_the_estimators_are_the_published_formulas_on_rows_computed_by_hand() -> None:
    def row(local: bool, mu: float, reward: float, pi: float, q_local: float) -> Logged:
        return Logged(local, mu, reward, pi, q_local=q_local, q_frontier=0.9)

    rows = [
        row(True, 1.0, 1.0, 1.0, 0.8),
        row(False, 0.1, 1.0, 0.0, 0.3),
        row(True, 0.1, 0.0, 1.0, 0.3),
        row(False, 0.1, 0.0, 1.0, 0.3),
    ]
    w = [1.0, 1 / 0.9, 1 / 0.1, 0.0]
    r = [1.0, 1.0, 0.0, 0.0]
    weighted = sum(a * b for a, b in zip(w, r, strict=True))
    assert ips(rows).value == pytest.approx(weighted / 4)
    assert snips(rows).value == pytest.approx(weighted / sum(w))
    direct = [0.8, 0.9, 0.3, 0.3]  # pi-weighted q of each row
    correction = [1.0 * (1 - 0.8), (1 / 0.9) * (1 - 0.9), 10.0 * (0 - 0.3), 0.0]
    assert doubly_robust(rows).value == pytest.approx(
        sum(d + c for d, c in zip(direct, correction, strict=True)) / 4
    )
    assert ips(rows).no_overlap == 0.0


def test_a_candidate_going_where_the_log_never_went_is_reported_not_covered() -> None:
    never_local = Logged(False, 0.0, 1.0, 1.0, q_local=0.5, q_frontier=0.9)
    rows = [never_local] * 3 + [Logged(True, 1.0, 1.0, 1.0, q_local=0.5, q_frontier=0.9)]
    assert ips(rows).no_overlap == pytest.approx(0.75)
    dr = doubly_robust(rows)
    assert dr.imputed == pytest.approx(0.75)
    assert dr.value == pytest.approx((0.5 * 3 + 1.0) / 4)  # the gaps valued by the model alone


def _log(n: int, rng: random.Random) -> tuple[list[Logged], float]:
    """A log of ``n`` decisions by the live policy (easy: local; hard: frontier, but EXPLORE of
    them local), with the candidate "everything local"; and the candidate's true value."""
    rows = []
    for _ in range(n):
        kind = "easy" if rng.random() < 0.6 else "hard"
        mu = 1.0 if kind == "easy" else EXPLORE
        served_local = rng.random() < mu
        reward = 1.0 if rng.random() < ACCEPT[(kind, served_local)] else 0.0
        rows.append(Logged(served_local, mu, reward, pi_local=1.0))
    truth = 0.6 * ACCEPT[("easy", True)] + 0.4 * ACCEPT[("hard", True)]
    return rows, truth


@pytest.mark.parametrize("name", ["ips", "snips", "dr"])
def test_on_simulated_logs_the_estimates_center_on_the_truth_and_the_intervals_cover_it(
    name: str,
) -> None:
    rng = random.Random(7)
    runs, n = 200, 1500
    values, covered = [], 0
    for _ in range(runs):
        rows, truth = _log(n, rng)
        if name == "ips":
            est = ips(rows)
        elif name == "snips":
            est = snips(rows)
        else:
            est = doubly_robust(cross_fit(rows, 5, mean_rate_model()))
        values.append(est.value)
        covered += est.covers(truth)
        assert est.no_overlap == 0.0 and math.isfinite(est.high - est.low)
    mean = sum(values) / runs
    spread = (sum((v - mean) ** 2 for v in values) / (runs - 1)) ** 0.5
    assert abs(mean - truth) < 3 * spread / runs**0.5 + 0.005  # unbiased within its noise
    assert covered / runs >= 0.9  # nominal 95%


def test_cross_fitting_never_predicts_a_row_with_a_model_that_saw_it() -> None:
    rows = [Logged(i % 2 == 0, 0.5, float(i < 50), 1.0) for i in range(100)]
    seen: list[int] = []

    def fit(train):  # type: ignore[no-untyped-def]
        seen.append(len(train))
        ids = {id(r) for r in train}
        return lambda row: (0.0 if id(row) in ids else 1.0, 0.0)

    out = cross_fit(rows, 4, fit)
    assert seen == [75, 75, 75, 75] and all(r.q_local == 1.0 for r in out)
    with pytest.raises(ValueError, match="2 folds"):
        cross_fit(rows, 1, fit)


def test_the_preview_estimate_covers_the_candidates_true_accept_and_says_what_it_imputes() -> None:
    """``off_policy`` on replay items logged by an exploring policy, for a rules candidate that
    sends everything local: the doubly robust interval holds the true accept rate, and the
    share the plain replay has to impute (hard requests served at the frontier) is reported."""
    rng = random.Random(11)
    targets = ["local", "frontier"]
    candidate = RulePolicy(RoutingConfig.model_validate({"default": "local"}), targets)
    items = []
    for i in range(1500):
        kind = "easy" if rng.random() < 0.6 else "hard"
        mu = 1.0 if kind == "easy" else EXPLORE
        local = rng.random() < mu
        features = RequestFeatures(
            endpoint="chat.completions", requested_model="auto", prompt_tokens=10,
            tags={"family": kind},
            request_id=f"r{i}",
        )  # fmt: skip
        items.append(
            ReplayItem(
                features=features,
                served_arm="local" if local else "frontier",
                accepted=rng.random() < ACCEPT[(kind, local)],
                cost_usd=0.0 if local else 0.002,
                latency_ms=100.0,
                class_key=kind,
                logged_local_p=mu,
            )
        )
    truth = 0.6 * ACCEPT[("easy", True)] + 0.4 * ACCEPT[("hard", True)]

    def arm_of(target: str) -> Arm:
        return "local" if target == "local" else "frontier"

    est = off_policy(candidate, items, arm_of)
    assert est.accept is not None and est.accept.covers(truth), est
    assert est.local_share == 1.0 and est.rows == 1500 and est.without_propensity == 0
    assert est.cost_per_1k is not None and est.cost_per_1k.covers(0.0)
    hard_at_frontier = sum(1 for i in items if i.served_arm == "frontier") / len(items)
    assert est.replay_imputed == pytest.approx(hard_at_frontier)
    old = [dataclasses.replace(i, logged_local_p=None) for i in items]
    assert off_policy(candidate, old, arm_of).accept is None  # no propensity, no estimate


def _scored_log(n: int, rng: random.Random) -> tuple[list[Logged], float]:
    """Local accept = the request's score; the frontier 0.95. Logged: local above 0.7 and never
    below (no exploration), a third of the frontier-served answered by a shadow too. Candidate:
    local above 0.5, where the log has no local answer to weigh."""
    rows, truth = [], 0.0
    for _ in range(n):
        s = rng.random()
        mu = 1.0 if s > 0.7 else 0.0
        pi = 1.0 if s > 0.5 else 0.0
        local = mu == 1.0
        reward = float(rng.random() < (s if local else 0.95))
        shadow = float(rng.random() < s) if not local and rng.random() < 0.3 else None
        rows.append(Logged(local, mu, reward, pi, score=s, shadow_reward=shadow))
        truth += pi * s + (1 - pi) * 0.95
    return rows, truth / n


def test_shadows_and_the_score_let_the_reward_model_impute_where_the_log_never_went() -> None:
    """Rows with no overlap are valued by the reward model alone: a constant one imputes the
    served-local mean (requests scoring above 0.7) and misses; one by score decile, fitted on
    the shadow answers too, centres on the truth."""
    rng = random.Random(3)
    runs = 60
    covered = {"mean": 0, "score": 0}
    error = {"mean": 0.0, "score": 0.0}
    for _ in range(runs):
        rows, truth = _scored_log(1500, rng)
        for name, model in (("mean", mean_rate_model()), ("score", score_rate_model())):
            est = doubly_robust(cross_fit(rows, 5, model))
            assert est.imputed == pytest.approx(0.2, abs=0.05)  # the (0.5, 0.7] scores
            covered[name] += est.covers(truth)
            error[name] += abs(est.value - truth) / runs
    assert covered["score"] / runs >= 0.9, covered
    assert covered["mean"] / runs < 0.5, covered
    assert error["score"] < 0.01 < error["mean"], error


def test_a_local_answer_of_other_weights_is_valued_by_the_reward_model_alone() -> None:
    """With ``m_i = 0`` (served local by other weights) a row's term is ``pi q_local +
    (1 - pi) q_frontier``, it counts as imputed, and the reward model never fits its reward."""

    def row(local: bool, mu: float, reward: float, pi: float, other: bool = False) -> Logged:
        return Logged(local, mu, reward, pi, q_local=0.3, q_frontier=0.9, other_weights=other)

    rows = [
        row(True, 0.1, 1.0, 1.0),  # the candidate's weights: 0.3 + 10 (1 - 0.3)
        row(True, 0.1, 0.0, 1.0, other=True),  # other weights: q_local alone
        row(True, 0.5, 0.0, 0.5, other=True),  # half local: 0.5 q_local + 0.5 q_frontier
        row(False, 0.1, 1.0, 0.0),  # frontier, untouched: 0.9 + (1 / 0.9)(1 - 0.9)
    ]
    terms = [0.3 + 10 * 0.7, 0.3, 0.5 * 0.3 + 0.5 * 0.9, 0.9 + 0.1 / 0.9]
    dr = doubly_robust(rows)
    assert dr.value == pytest.approx(sum(terms) / 4)
    assert dr.imputed == pytest.approx(0.5) and ips(rows).no_overlap == pytest.approx(0.5)
    plain = [dataclasses.replace(r, other_weights=False) for r in rows]  # m_i = 1 throughout
    counted = [terms[0], 0.3 + 10 * (0 - 0.3), 0.6 + 1.0 * (0 - 0.3), terms[3]]
    assert doubly_robust(plain).value == pytest.approx(sum(counted) / 4)
    for model in (score_rate_model(), mean_rate_model(prior=0.5, strength=2.0)):
        q_local = model(rows)(rows[0])[0]
        assert q_local == pytest.approx((1.0 + 1.0) / (1 + 2.0))  # the one local reward fitted


def _weights_log(n: int, rng: random.Random) -> tuple[list[ReplayItem], float]:
    """A round in which the local weights change halfway: ``old`` fails every local answer,
    ``new`` answers as ``ACCEPT`` says; shadow answers (a third of the frontier-served) come
    from whichever weights serve. The log explores local at EXPLORE on every request; the
    candidate (rules) sends everything local, to the ``new`` weights: its true value is theirs."""
    items = []
    for i in range(n):
        weights = "old" if i < n // 2 else "new"
        kind = "easy" if rng.random() < 0.6 else "hard"
        local = rng.random() < EXPLORE
        accept = ACCEPT[(kind, True)] if weights == "new" else 0.0
        shadowed = not local and rng.random() < 1 / 3
        features = RequestFeatures(
            endpoint="chat.completions", requested_model="auto", prompt_tokens=10,
            tags={"family": kind}, request_id=f"r{i}",
        )  # fmt: skip
        items.append(
            ReplayItem(
                features=features,
                served_arm="local" if local else "frontier",
                accepted=rng.random() < (accept if local else ACCEPT[(kind, False)]),
                cost_usd=0.0 if local else 0.002,
                latency_ms=100.0,
                shadow_accepted=rng.random() < accept if shadowed else None,
                class_key=kind,
                logged_local_p=EXPLORE,
                served_weights=weights if local else None,
                shadow_weights=weights if shadowed else None,
            )
        )
    return items, 0.6 * ACCEPT[("easy", True)] + 0.4 * ACCEPT[("hard", True)]


def test_counting_only_the_served_weights_verdicts_finds_what_new_weights_will_get() -> None:
    """Old weights' local failures drag the estimate of a local-heavy candidate far below what
    the new weights will get; counting only the new weights' verdicts (``local_weights``), the
    95% interval covers it."""
    rng = random.Random(5)
    candidate = RulePolicy(RoutingConfig.model_validate({"default": "local"}), ["local", "f"])

    def arm_of(target: str) -> Arm:
        return "local" if target == "local" else "frontier"

    runs, covered = 20, 0
    for _ in range(runs):
        items, truth = _weights_log(3000, rng)
        everything = off_policy(candidate, items, arm_of).accept
        assert everything is not None and everything.high < truth - 0.15, everything
        new = off_policy(candidate, items, arm_of, local_weights="new").accept
        assert new is not None and new.imputed == pytest.approx(0.05, abs=0.02)
        covered += new.covers(truth)
    assert covered / runs >= 0.9, covered


def test_the_window_interval_covers_a_fresh_windows_accept_where_the_expected_one_does_not() -> (
    None
):
    # a policy whose expected accept (0.95) is known to +-0.004 (se 0.002); windows of 500
    # requests scatter with sd ~0.0097 around it
    rng = random.Random(7)
    estimate = Estimate(0.95, 0.95 - Z95 * 0.002, 0.95 + Z95 * 0.002, 2000, 0.0, 0.0)
    low, high = estimate.predict(500)
    assert high - low == pytest.approx(2 * Z95 * math.sqrt(0.002**2 + 0.95 * 0.05 / 500))
    windows = [sum(rng.random() < 0.95 for _ in range(500)) / 500 for _ in range(2000)]
    window_cover = sum(low <= w <= high for w in windows) / len(windows)
    expected_cover = sum(estimate.covers(w) for w in windows) / len(windows)
    assert 0.93 <= window_cover <= 0.98
    assert expected_cover < 0.5
    assert Estimate(0.999, 0.99, 1.0, 10, 0.0, 0.0).predict(10)[1] == 1.0  # clipped
