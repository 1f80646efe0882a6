"""The learned local-vs-frontier policy and policy replay."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from router.config import LearnedConfig, RoutingConfig
from router.features import RequestFeatures
from router.learned import Arm, LearnedPolicy, LearnedState, Outcome, class_key, fit
from router.policy import RulePolicy
from router.replay import ReplayItem, replay
from router.request_text import RequestText

TARGETS = ["local", "frontier"]


def _rules(**kw: object) -> RulePolicy:
    data: dict[str, object] = {
        "default": "frontier",
        "aliases": {"auto": None, "big": "frontier"},
        "fallbacks": {"local": ["frontier"]},
    }
    data.update(kw)
    return RulePolicy(RoutingConfig.model_validate(data), TARGETS)


CFG = LearnedConfig(
    local_target="local", frontier_target="frontier", min_samples=10, exploration_share=0.1
)


ASKS = {
    "rename": "Rename the variable total to grand_total in this function.",
    "write_test": "Write a pytest test for this function that covers the edge cases.",
    "fresh": "Explain what this regular expression matches.",
}


def _text(family: str, i: int = 0) -> RequestText:
    ask = ASKS[family]
    return RequestText(
        system="You are a coding assistant in the user's IDE.",
        last_user=f"File: util_{i % 7}.py\n```python\ndef f{i}(x):\n    return x\n```\n{ask}",
        turns=2,
    )


def _f(family: str, rid: str = "r", i: int = 0, *, model: str = "auto") -> RequestFeatures:
    return RequestFeatures(
        endpoint="chat.completions",
        requested_model=model,
        prompt_tokens=10,
        request_id=rid,
        text=_text(family, i),
    )


def _outcomes(family: str, arm: Arm, acc: int, rej: int) -> list[Outcome]:
    verdicts = [True] * acc + [False] * rej
    return [Outcome(family, arm, v, text=_text(family, i)) for i, v in enumerate(verdicts)]


def _renames_local_tests_frontier() -> list[Outcome]:
    """The local model does renames as well as the frontier, and fails at writing tests."""
    return (  # enough verdicts for the threshold's lower bounds (router/calibration.py)
        _outcomes("rename", "local", 380, 20)
        + _outcomes("rename", "frontier", 97, 3)
        + _outcomes("write_test", "local", 20, 380)
        + _outcomes("write_test", "frontier", 90, 10)
    )


def test_a_request_goes_local_when_its_score_clears_the_calibrated_threshold() -> None:
    outcomes = _renames_local_tests_frontier()
    state = fit(outcomes, "fit-1")
    assert state.scorer is not None and len(state.calibration["plain"].scores) >= CFG.min_samples
    policy = LearnedPolicy(_rules(), CFG, state)
    d = policy.decide(_f("rename", i=1000))
    assert d.targets == ("local", "frontier") and d.reason.startswith("learned:local")
    assert d.kind == "learned_local"
    assert "p_local=" in d.reason and "threshold=" in d.reason and "scorer=fit-1" in d.reason
    assert d.policy_version == "v1+fit-1" and d.p_local is not None and d.p_local > 0.8
    hard = [policy.decide(_f("write_test", f"r{i}", i=i)) for i in range(1000)]
    explored = [d for d in hard if d.target == "local"]
    # the exploration share only, capped by its measured harm (router/calibration.py)
    share = policy.plans["plain"].exploration_share
    assert share < CFG.exploration_share
    kinds = [d.kind for d in explored]
    assert abs(kinds.count("learned_explore") / 1000 - share) < 0.015
    assert kinds.count("learned_local") <= 20  # a few score past the threshold
    assert set(kinds) <= {"learned_explore", "learned_local"}
    assert {d.kind for d in hard if d.target == "frontier"} == {"learned_frontier"}


def test_untagged_requests_are_told_apart_by_what_they_say() -> None:
    """No tags at all: the same evidence group '*', routed apart by their text."""
    outcomes = [
        Outcome("*", o.arm, o.accepted, text=o.text)
        for o in _outcomes("rename", "local", 95, 5) + _outcomes("write_test", "local", 5, 95)
    ]
    policy = LearnedPolicy(
        _rules(), CFG.model_copy(update={"exploration_share": 0.0}), fit(outcomes, "f")
    )
    assert policy.decide(_f("rename", i=500)).target == "local"
    assert policy.decide(_f("write_test", i=500)).target == "frontier"


def test_cold_start_sends_everything_to_the_frontier_but_the_exploration_share() -> None:
    policy = LearnedPolicy(_rules(), CFG, LearnedState("empty"))
    targets = [policy.decide(_f("rename", f"c{i}")).target for i in range(1000)]
    # the exploration share, capped where its harm is unmeasured: half the quality budget
    assert policy.plans["plain"].exploration_share == pytest.approx(0.5 * (1 - 0.95))
    assert 0.015 < targets.count("local") / 1000 < 0.035
    reason = policy.decide(_f("rename", "x")).reason
    assert "no scorer fitted yet" in reason
    # too few held-out verdicts: no threshold, so nothing goes local by score
    few = LearnedPolicy(_rules(), CFG, fit(_outcomes("fresh", "local", 12, 0), "few"))
    assert few.threshold == float("inf")


def test_exploration_is_stable_per_request_id() -> None:
    policy = LearnedPolicy(_rules(), CFG, LearnedState("empty"))
    assert {policy.decide(_f("fresh", "same-id")).target for _ in range(5)} in (
        {"local"},
        {"frontier"},
    )


def test_pinned_aliases_keep_priority_over_the_learned_decision() -> None:
    policy = LearnedPolicy(_rules(), CFG, fit(_outcomes("rename", "local", 100, 0), "f"))
    assert policy.decide(_f("rename", model="big")).target == "frontier"


def test_odd_requests_are_scored_or_defaulted_never_raised() -> None:
    policy = LearnedPolicy(_rules(), CFG, fit(_outcomes("rename", "local", 95, 5), "f"))
    for text in (
        None,
        RequestText(),
        RequestText(last_user="x" * 5_000_000),
        RequestText(tool_names=("??",) * 500),
    ):
        f = RequestFeatures("chat.completions", "auto", 1, request_id="odd", text=text)
        assert policy.decide(f).target in ("local", "frontier")


def test_state_round_trips_through_json_and_tools_are_their_own_class() -> None:
    state = fit(_outcomes("rename", "local", 60, 20), "v9")
    again = LearnedState.from_json(json.loads(json.dumps(state.to_json())))
    assert again.counts("rename", "local").accepted == 60 and again.version == "v9"
    assert again.scorer is not None and state.scorer is not None
    probe = _text("rename", 3)
    assert again.scorer.predict_local(probe) == state.scorer.predict_local(probe)
    assert again.calibration["plain"].accepted == state.calibration["plain"].accepted
    assert again.to_json() == state.to_json()
    f = RequestFeatures("chat.completions", "auto", 1, tags={"family": "a"}, has_tools=True)
    assert class_key(f, ["family"]) == "a|tools"
    assert class_key(RequestFeatures("chat.completions", "auto", 1), ["family"]) == "*"


def test_replay_predicts_local_share_cost_and_accept_rate_of_a_candidate() -> None:
    items = []
    for i in range(100):
        fam = "rename" if i % 2 else "write_test"
        items.append(
            ReplayItem(
                features=_f(fam, f"id{i}", i=i),
                served_arm="frontier",
                accepted=True,
                cost_usd=0.01,
                latency_ms=900,
                shadow_accepted=(fam == "rename"),
                class_key=fam,
            )
        )
    for i in range(20):  # a few local answers so local cost/latency are known
        items.append(
            ReplayItem(
                features=_f("rename", f"l{i}", i=i),
                served_arm="local",
                accepted=True,
                cost_usd=0.0005,
                latency_ms=200,
                class_key="rename",
            )
        )
    arm = {"local": "local", "frontier": "frontier"}.__getitem__
    current = replay(_rules(), items, arm)  # type: ignore[arg-type]
    assert current.overall.local_share < 0.2
    outcomes = (
        _outcomes("rename", "local", 200, 0)
        + _outcomes("write_test", "local", 2, 60)
        + _outcomes("rename", "frontier", 50, 0)
    )
    greedy = CFG.model_copy(update={"exploration_share": 0.0, "frontier_check_share": 0.0})
    candidate = LearnedPolicy(_rules(), greedy, fit(outcomes, "cand"))
    report = replay(candidate, items, arm)  # type: ignore[arg-type]
    assert report.per_class["rename"].local_share == 1.0
    assert report.per_class["rename"].accept_rate == 1.0  # the shadow verdicts
    # the quality target (0.95 of frontier-only) leaves room for a few of the hard ones
    assert report.per_class["write_test"].local_share <= 0.15
    assert report.overall.cost_per_1k_usd < current.overall.cost_per_1k_usd


def test_every_decision_carries_its_propensity_score_threshold_and_state_version() -> None:
    outcomes = _renames_local_tests_frontier()
    policy = LearnedPolicy(_rules(), CFG, fit(outcomes, "fit-1"))
    local = policy.decide(_f("rename", i=1000))
    assert local.kind == "learned_local" and local.propensity == 1 - CFG.frontier_check_share
    assert local.threshold == policy.threshold and local.state_version == "fit-1"
    assert local.p_local is not None and local.p_local >= local.threshold
    decided = [policy.decide(_f("write_test", f"r{i}", i=i)) for i in range(400)]
    hard = [d for d in decided if d.kind not in ("learned_local", "learned_check")]
    assert {d.kind for d in hard} == {"learned_explore", "learned_frontier"}
    # Below the cut a request goes local only by the exploration draw: both outcomes of the
    # draw carry its probability, the full precision the reason's three digits lose.
    assert {d.propensity for d in hard} == {policy.plans["plain"].exploration_share}
    assert all(d.p_local is not None and d.p_local < policy.threshold for d in hard)
    assert all(d.decided_target == d.target for d in hard)
    pinned = policy.decide(_f("rename", model="big"))
    assert pinned.kind == "alias" and pinned.propensity == 0.0  # pinned to the frontier


def test_a_cold_policy_records_no_threshold_and_the_exploration_propensity() -> None:
    policy = LearnedPolicy(_rules(), CFG, LearnedState(version="cold"))
    d = policy.decide(_f("rename"))
    assert d.threshold is None and d.p_local is None  # nothing fitted: no cut to record
    assert d.propensity == policy.plans["plain"].exploration_share and d.state_version == "cold"


def test_tool_requests_have_their_own_threshold_and_no_exploration_until_evidence() -> None:
    # ample chat evidence, none with tools: an agent step is never sent local on it
    policy = LearnedPolicy(_rules(), CFG, fit(_outcomes("rename", "local", 400, 0), "chat"))
    assert math.isfinite(policy.plans["plain"].threshold)
    assert policy.plans["tools"].threshold == math.inf
    assert policy.plans["tools"].exploration_share == 0.0
    steps = [
        policy.decide(
            RequestFeatures(
                "chat.completions",
                "auto",
                10,
                request_id=f"s{i}",
                has_tools=True,
                text=dataclasses.replace(_text("rename", i), has_tools=True),
            )
        )
        for i in range(300)
    ]
    assert {d.target for d in steps} == {"frontier"}
    assert {d.propensity for d in steps} == {0.0}
    assert all("segment=tools" in d.reason for d in steps)
    cold = LearnedPolicy(_rules(), CFG, LearnedState("cold"))
    tool_step = RequestFeatures("chat.completions", "auto", 1, request_id="x", has_tools=True)
    assert cold.decide(tool_step).propensity == 0.0
    # with the knob on, an unproven tools segment explores like chat
    bold = CFG.model_copy(update={"explore_unproven_tools": True})
    explored = LearnedPolicy(_rules(), bold, LearnedState("cold")).decide(tool_step).propensity
    assert explored is not None and explored > 0


def test_a_share_of_would_be_local_requests_is_checked_at_the_frontier() -> None:
    """Overlap for off-policy estimates: 2% of the requests past the threshold stay at the
    frontier, both outcomes carrying the same propensity; a retried request lands the same."""
    policy = LearnedPolicy(_rules(), CFG, fit(_outcomes("rename", "local", 400, 0), "f"))
    decided = [policy.decide(_f("rename", f"q{i}", i=i % 400)) for i in range(2000)]
    past = [d for d in decided if d.kind in ("learned_local", "learned_check")]
    assert len(past) > 1900
    checked = [d for d in past if d.kind == "learned_check"]
    assert 0.01 < len(checked) / len(past) < 0.03
    assert {d.target for d in checked} == {"frontier"} and {d.propensity for d in past} == {0.98}
    assert all(d.reason.startswith("learned:check") for d in checked)
    again = policy.decide(_f("rename", "q0", i=0))
    assert again.kind == decided[0].kind
    off = CFG.model_copy(update={"frontier_check_share": 0.0})
    plain = LearnedPolicy(_rules(), off, policy.state).decide(_f("rename", "q1", i=1))
    assert plain.kind == "learned_local" and plain.propensity == 1.0
