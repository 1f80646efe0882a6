"""Routing policy v1: aliases, first-match rules, default, fallback chains, strict config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from router.config import RoutingConfig
from router.errors import PolicyConfigError, UnknownModelError
from router.features import RequestFeatures, estimate_tokens
from router.policy import RulePolicy
from router.replicas import NoHealthyReplicaError, ReplicaView, RoundRobinSelector

TARGETS = ["local", "openai", "anthropic"]


def _policy(**kw: object) -> RulePolicy:
    data: dict[str, object] = {
        "default": "local",
        "aliases": {"auto": None, "fast": "local", "smart": "openai"},
        "rules": [
            {"name": "tools", "match": {"has_tools": True}, "target": "openai"},
            {"name": "long", "match": {"min_prompt_tokens": 1000}, "target": "anthropic"},
            {"name": "hint", "match": {"route_hint": ["premium"]}, "target": "anthropic"},
            {
                "name": "team",
                "match": {"tags": {"team": "infra"}, "endpoints": ["completions"]},
                "target": "openai",
            },
        ],
        "fallbacks": {"local": ["openai", "anthropic"], "openai": ["anthropic"]},
    }
    data.update(kw)
    return RulePolicy(RoutingConfig.model_validate(data), TARGETS)


def _f(model: str = "auto", **kw: object) -> RequestFeatures:
    base: dict[str, object] = {
        "endpoint": "chat.completions",
        "requested_model": model,
        "prompt_tokens": 10,
    }
    base.update(kw)
    return RequestFeatures(**base)  # type: ignore[arg-type]


def test_auto_without_matching_rule_goes_to_default_with_its_fallback_chain() -> None:
    d = _policy().decide(_f())
    assert d.targets == ("local", "openai", "anthropic")
    assert d.reason == "default" and d.kind == "default" and d.policy_version == "v1"


@pytest.mark.parametrize(
    ("features", "target", "reason"),
    [
        (_f(has_tools=True), "openai", "rule:tools"),
        (_f(prompt_tokens=5000), "anthropic", "rule:long"),
        (_f(route_hint="premium"), "anthropic", "rule:hint"),
        (_f(endpoint="completions", tags={"team": "infra"}), "openai", "rule:team"),
        (_f(tags={"team": "infra"}), "local", "default"),
    ],
)
def test_first_matching_rule_decides_for_auto(
    features: RequestFeatures, target: str, reason: str
) -> None:
    d = _policy().decide(features)
    assert (d.target, d.reason) == (target, reason)
    assert d.kind == reason.split(":", 1)[0]


def test_pinned_alias_skips_rules_unless_configured() -> None:
    assert _policy().decide(_f("fast", has_tools=True)).target == "local"
    p = _policy(pinned_aliases_use_rules=True)
    assert p.decide(_f("fast", has_tools=True)).target == "openai"
    assert p.decide(_f("fast")).reason == "alias:fast"
    assert p.decide(_f("fast")).kind == "alias"


def test_target_name_is_callable_directly_and_unknown_model_raises() -> None:
    assert _policy().decide(_f("anthropic")).targets == ("anthropic",)
    with pytest.raises(UnknownModelError) as exc:
        _policy().decide(_f("gpt-9"))
    assert "auto" in str(exc.value)


def test_model_names_list_aliases_first_then_targets() -> None:
    assert _policy().model_names() == ["auto", "fast", "smart", "anthropic", "local", "openai"]


def test_config_rejects_unknown_keys_and_self_fallback() -> None:
    with pytest.raises(ValidationError):
        RoutingConfig.model_validate({"default": "local", "rulez": []})
    with pytest.raises(ValidationError):
        RoutingConfig.model_validate({"default": "local", "fallbacks": {"local": ["local"]}})


def test_policy_refuses_undefined_targets_naming_them() -> None:
    with pytest.raises(PolicyConfigError, match="nowhere"):
        _policy(default="nowhere")


def test_token_estimate_rounds_up() -> None:
    assert estimate_tokens(0) == 0 and estimate_tokens(1) == 1 and estimate_tokens(8) == 2


def test_round_robin_skips_unhealthy_replicas() -> None:
    sel = RoundRobinSelector()
    reps = [ReplicaView("a", True), ReplicaView("b", False), ReplicaView("c", True)]
    picks = [sel.select_replica("t", reps, _f()) for _ in range(4)]
    assert picks == ["a", "c", "a", "c"]
    with pytest.raises(NoHealthyReplicaError):
        sel.select_replica("t", [ReplicaView("a", False)], _f())
