"""What the router reads of an agent's step, and when a failed local step sends the episode to
the frontier (``router.episode_fallback``)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from router.chat_text import is_error_result, request_text
from router.config import EpisodeRoutingConfig, RoutingConfig
from router.decision import DecisionKind, RouteDecision
from router.episode_fallback import (
    KEPT_LOCAL_STEPS,
    EpisodeMemory,
    failed_step,
    fallback_decision,
    fallback_target,
    fallback_turn,
    loop_decision,
    pinned,
)
from router.errors import PolicyConfigError
from router.policy import RulePolicy
from router.request_text import RequestText, ToolCallText
from router.scorer_features import Featurizer

TOOLS = [{"type": "function", "function": {"name": "read_file"}}]


def _call(i: int, name: str = "read_file", args: str = '{"path": "a.py"}') -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}


def _agent_body(results: list[str], last_args: str = '{"path": "a.py"}') -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "fix it"},
    ]
    for i, result in enumerate(results):
        args = last_args if i == len(results) - 1 else '{"path": "a.py"}'
        messages.append({"role": "assistant", "content": None, "tool_calls": [_call(i, args=args)]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": result})
    return {"model": "auto", "messages": messages, "tools": TOOLS}


def test_a_request_says_its_step_its_last_tool_result_and_the_error_streak() -> None:
    text = request_text("chat.completions", _agent_body(["ok", "Error: x", "error: y"], "{"))
    assert text.step == 3
    assert text.last_tool_result and text.last_tool_error
    assert text.tool_error_streak == 2
    assert text.last_calls == (ToolCallText("read_file", "{", "c2"),)
    first = request_text("chat.completions", _agent_body([]))
    assert (first.step, first.last_tool_result, first.tool_error_streak, first.last_calls) == (
        0,
        False,
        0,
        (),
    )
    # text after the results (Claude Code's reminders) keeps the streak; an ok result ends it
    body = _agent_body(["Error: a", "Error: b"])
    body["messages"].append({"role": "user", "content": "<system-reminder>...</system-reminder>"})
    again = request_text("chat.completions", body)
    assert (again.last_tool_result, again.tool_error_streak, len(again.last_calls)) == (False, 2, 1)
    assert request_text("chat.completions", _agent_body(["Error: a", "ok"])).tool_error_streak == 0


def test_tool_results_are_errors_only_when_they_say_so() -> None:
    for text in ("Error: no such file", "  error - timeout", "<tool_use_error>No</tool_use_error>"):
        assert is_error_result(text)
    for text in ("ok", "2 failed, 3 passed", "errors.py:3: def f", "No errors found", ""):
        assert not is_error_result(text)


def test_odd_tool_calls_in_the_history_never_raise() -> None:
    odd: list[Any] = [None, "x", {"function": "f"}, {"function": {"name": 5, "arguments": {}}}]
    body: dict[str, Any] = {
        "messages": [
            {"role": "assistant", "tool_calls": odd},
            {"role": "assistant", "tool_calls": "nope"},
            {"role": "tool", "content": [{"type": "text", "text": "Error: z"}]},
        ]
    }
    text = request_text("chat.completions", body)
    assert text.step == 2 and text.last_calls == () and text.last_tool_error
    body["messages"][1]["tool_calls"] = odd
    calls = request_text("chat.completions", body).last_calls
    assert calls == (ToolCallText("", "{}", ""),)


def test_agent_step_features_are_read_only_for_tool_requests() -> None:
    featurizer = Featurizer()
    text = request_text("chat.completions", _agent_body(["Error: x"]))
    names = featurizer.categorical(text, text.last_user)
    assert {"agent_step=1", "agent_last=tool_result", "agent_last=tool_error"} <= set(names)
    assert "agent_error_streak=1" in names
    plain = RequestText(last_user="hi", step=4, last_tool_result=True, last_tool_error=True)
    assert not [n for n in featurizer.categorical(plain, "hi") if n.startswith("agent_")]


CFG = EpisodeRoutingConfig()


def _text(step: int, streak: int = 0) -> RequestText:
    return RequestText(
        step=step, last_tool_result=True, last_tool_error=streak > 0, tool_error_streak=streak
    )


def test_only_a_local_step_can_fail() -> None:
    local = EpisodeMemory(frozenset({0, 1}))
    assert failed_step(local, _text(2), "unknown_tool:x", CFG) is not None
    assert failed_step(local, _text(3), "unknown_tool:x", CFG) is None  # step 2 went elsewhere
    assert failed_step(local, _text(0), "unknown_tool:x", CFG) is None  # no previous step
    failure = failed_step(local, _text(2), "schema:read_file", CFG)
    assert failure is not None and failure.reason == (
        "invalid_tool_call failed_step=1 problem=schema:read_file"
    )


def test_an_error_streak_fails_at_its_length() -> None:
    local = EpisodeMemory(frozenset({4}))
    cfg = EpisodeRoutingConfig(error_streak=2)
    assert failed_step(local, _text(5, streak=1), None, cfg) is None
    failure = failed_step(local, _text(5, streak=2), None, cfg)
    assert failure is not None and failure.kind == "error_streak"
    assert failure.problem == "2_errors"


def test_the_fallback_lasts_its_sticky_turns_or_the_rest_of_the_episode() -> None:
    memory = EpisodeMemory(frozenset({2}), fallback_step=3, fallback_reason="error_streak x")
    assert [fallback_turn(memory, s, CFG) for s in range(2, 8)] == [None, 1, 2, 3, None, None]
    forever = EpisodeRoutingConfig(sticky_turns=None)
    assert fallback_turn(memory, 500, forever) == 498
    assert fallback_turn(EpisodeMemory(), 3, forever) is None


def test_the_fallback_decision_names_the_failure_and_the_turn() -> None:
    memory = EpisodeMemory(frozenset({0}), 1, "invalid_tool_call failed_step=0 problem=p")
    policy = RouteDecision(
        ("local", "frontier"), "default", "v1", 0.9, kind="default", propensity=1.0
    )
    decided = fallback_decision(policy, ("frontier", "other"), memory, 2, CFG)
    assert decided.targets == ("frontier", "other")
    # The record keeps what the policy chose and that the fallback left local for certain.
    assert decided.decided_target == "local" and decided.propensity == 0.0
    assert decided.reason == "episode_fallback:invalid_tool_call failed_step=0 problem=p turn=2/3"
    assert decided.kind == "episode_fallback"
    assert (decided.policy_version, decided.p_local) == ("v1", 0.9)
    forever = EpisodeRoutingConfig(sticky_turns=None)
    assert fallback_decision(policy, ("f",), memory, 9, forever).reason.endswith("turn=9/rest")


def test_the_client_pinning_a_target_is_kept_and_the_fallback_target_is_resolved() -> None:
    assert pinned(RouteDecision(("local",), "alias:switchyard-local", "v", kind="alias"))
    assert pinned(RouteDecision(("local",), "target", "v", kind="target"))
    assert not pinned(
        RouteDecision(("local",), "learned:local p_local=0.9", "v", kind="learned_local")
    )
    # A rule named like an alias is a rule: the kind decides, not the words.
    assert not pinned(RouteDecision(("local",), "alias:x", "v", kind="rule"))
    decision = RouteDecision(("local", "local-2", "frontier-b"), "default", "v", kind="default")
    locals_ = frozenset({"local", "local-2"})
    assert fallback_target(decision, CFG, None, locals_) == "frontier-b"
    assert fallback_target(decision, CFG, "frontier-a", locals_) == "frontier-a"
    named = EpisodeRoutingConfig(fallback_target="frontier-c")
    assert fallback_target(decision, named, "frontier-a", locals_) == "frontier-c"
    lone = RouteDecision(("local",), "default", "v", kind="default")
    assert fallback_target(lone, CFG, None, locals_) is None


def test_memory_keeps_the_newest_local_steps() -> None:
    memory = EpisodeMemory()
    for step in range(KEPT_LOCAL_STEPS + 10):
        memory = memory.with_local(step)
    assert len(memory.local_steps) == KEPT_LOCAL_STEPS
    assert max(memory.local_steps) == KEPT_LOCAL_STEPS + 9 and 9 not in memory.local_steps


def test_a_fallback_target_the_config_does_not_define_is_refused() -> None:
    routing = RoutingConfig.model_validate(
        {"default": "local", "episodes": {"fallback_target": "nowhere"}}
    )
    with pytest.raises(PolicyConfigError, match="nowhere"):
        RulePolicy(routing, ["local"])
    with pytest.raises(ValueError, match="sticky_turns"):
        EpisodeRoutingConfig(sticky_turns=0)


LOCAL_CHAIN = ("local", "frontier")
FRONTIER_CHAIN = ("frontier",)


def _loop(reason: str, memory: EpisodeMemory, results: list[str]) -> RouteDecision:
    chain = (
        LOCAL_CHAIN if reason.startswith(("learned:explore", "learned:local")) else FRONTIER_CHAIN
    )
    kind = cast(DecisionKind, reason.split(" ", 1)[0].replace(":", "_"))
    decision = RouteDecision(chain, reason, "v1", 0.1, kind=kind)
    text = request_text("chat.completions", _agent_body(results))
    return loop_decision(
        decision, memory, text, local_chain=LOCAL_CHAIN, frontier_chain=FRONTIER_CHAIN
    )


def test_an_agent_loop_that_went_local_stays_local_and_says_why() -> None:
    after_local = EpisodeMemory(frozenset({0}))
    kept = _loop("learned:frontier p_local=0.100", after_local, ["ok"])
    assert kept.targets == LOCAL_CHAIN
    assert kept.reason == "episode_loop:local learned:frontier p_local=0.100"
    assert kept.kind == "episode_loop"
    assert (kept.policy_version, kept.p_local) == ("v1", 0.1)
    assert kept.decided_target == "frontier" and kept.propensity == 1.0


def test_exploration_starts_only_at_a_loops_first_step() -> None:
    mid_loop = _loop("learned:explore p_local=0.100", EpisodeMemory(), ["ok"])
    assert mid_loop.targets == FRONTIER_CHAIN
    assert mid_loop.reason.startswith("episode_loop:frontier learned:explore")
    # the first step (no tool result yet: a new user turn) explores as the policy drew it
    assert _loop("learned:explore", EpisodeMemory(), []).targets == LOCAL_CHAIN


def test_a_loop_the_frontier_began_is_not_sent_local_half_way_by_a_score() -> None:
    mid_loop = _loop("learned:local p_local=0.620", EpisodeMemory(), ["ok"])
    assert mid_loop.targets == FRONTIER_CHAIN
    assert mid_loop.reason == "episode_loop:frontier learned:local p_local=0.620"
    # a new user turn is routed by its score
    assert _loop("learned:local p_local=0.620", EpisodeMemory(), []).targets == LOCAL_CHAIN


def test_pinned_and_rule_decisions_are_not_made_whole() -> None:
    after_local = EpisodeMemory(frozenset({0}))
    for reason in ("alias:gpt-4o", "rule:big-prompts", "target"):
        assert _loop(reason, after_local, ["ok"]).reason == reason
        assert _loop(reason, EpisodeMemory(), ["ok"]).reason == reason
