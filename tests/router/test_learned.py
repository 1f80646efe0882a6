"""The learned local-vs-frontier policy and policy replay."""

from __future__ import annotations

from router.config import LearnedConfig, RoutingConfig
from router.features import RequestFeatures
from router.learned import LearnedPolicy, LearnedState, Outcome, class_key, fit
from router.policy import RulePolicy
from router.replay import ReplayItem, replay

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


def _f(family: str, rid: str = "r", **kw: object) -> RequestFeatures:
    return RequestFeatures(
        endpoint="chat.completions",
        requested_model=kw.pop("model", "auto"),  # type: ignore[arg-type]
        prompt_tokens=10,
        tags={"family": family},
        request_id=rid,
        **kw,
    )  # type: ignore[arg-type]


def _outcomes(family: str, arm: str, acc: int, rej: int) -> list[Outcome]:
    return ([Outcome(family, arm, True)] * acc) + ([Outcome(family, arm, False)] * rej)  # type: ignore[arg-type]


def test_class_moves_to_local_only_when_its_lower_bound_meets_the_quality_target() -> None:
    outcomes = (
        _outcomes("rename", "local", 49, 1)
        + _outcomes("rename", "frontier", 49, 1)
        + _outcomes("write_test", "local", 5, 45)
        + _outcomes("write_test", "frontier", 45, 5)
        + _outcomes("fresh", "local", 3, 0)
    )
    policy = LearnedPolicy(_rules(), CFG, fit(outcomes, "fit-1"))
    d = policy.decide(_f("rename"))
    assert d.targets == ("local", "frontier") and d.reason.startswith("learned:local")
    assert d.policy_version == "v1+fit-1"
    assert policy.predict_local_accept(_f("rename")) > 0.9
    hard = [policy.decide(_f("write_test", f"r{i}")).target for i in range(1000)]
    assert 0.07 < hard.count("local") / 1000 < 0.13  # the exploration share only
    # too few samples: stays on the frontier apart from exploration
    assert policy.decide(_f("fresh", "x")).reason.split()[0] in (
        "learned:frontier",
        "learned:explore",
    )


def test_exploration_is_stable_per_request_id() -> None:
    policy = LearnedPolicy(_rules(), CFG, LearnedState("empty"))
    assert {policy.decide(_f("any", "same-id")).target for _ in range(5)} in (
        {"local"},
        {"frontier"},
    )


def test_pinned_aliases_keep_priority_over_the_learned_decision() -> None:
    policy = LearnedPolicy(_rules(), CFG, fit(_outcomes("rename", "local", 100, 0), "f"))
    assert policy.decide(_f("rename", model="big")).target == "frontier"


def test_state_round_trips_through_json_and_tools_are_their_own_class() -> None:
    state = fit(_outcomes("a", "local", 3, 1), "v9")
    again = LearnedState.from_json(state.to_json())
    assert again.counts("a", "local").accepted == 3 and again.version == "v9"
    assert class_key(_f("a", has_tools=True), ["family"]) == "a|tools"
    assert class_key(RequestFeatures("chat.completions", "auto", 1), ["family"]) == "*"


def test_replay_predicts_local_share_cost_and_accept_rate_of_a_candidate() -> None:
    items = []
    for i in range(100):
        fam = "rename" if i % 2 else "write_test"
        items.append(
            ReplayItem(
                features=_f(fam, f"id{i}"),
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
                features=_f("rename", f"l{i}"),
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
    outcomes = _outcomes("rename", "local", 70, 0) + _outcomes("rename", "frontier", 50, 0)
    candidate = LearnedPolicy(
        _rules(), CFG.model_copy(update={"exploration_share": 0.0}), fit(outcomes, "cand")
    )
    report = replay(candidate, items, arm)  # type: ignore[arg-type]
    assert report.per_class["rename"].local_share == 1.0
    assert report.per_class["rename"].accept_rate == 1.0
    assert report.per_class["write_test"].local_share == 0.0
    assert report.overall.cost_per_1k_usd < current.overall.cost_per_1k_usd
