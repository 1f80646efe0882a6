"""One judgement of a broken call across the agent package: a call against its tool's schema is
invalid for the gate, flagged by the audits, rejected as routing evidence, penalized by the
episode reward, hinted by self-distillation and drops a distillation row, whatever the
environment reported (``traffic.tool_calls.check_call`` judges, for all of them)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rl_loop.agent.audits import audit_broken_calls
from rl_loop.agent.distill import episode_sft_row, row_examples
from rl_loop.agent.episode import (
    AgentEpisode,
    AgentStep,
    Message,
    TaskSpec,
    ToolCall,
    ToolResult,
    Verdict,
)
from rl_loop.agent.episode_rl import EpisodeRewardConfig, episode_reward
from rl_loop.agent.gate import evaluate_episodes
from rl_loop.agent.self_distill import failing_steps
from rl_loop.agent_evidence import episode_step_outcomes
from traffic.export.episode_export import trl_messages

REWARD = EpisodeRewardConfig()
PATH_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {"name": "read_file", "parameters": PATH_SCHEMA}},
    {"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object"}}},
)
TASK = TaskSpec("t1", "fix_bug", "Fix the bug.", "You are an agent.", TOOLS)


def _episode(read_arguments: str) -> AgentEpisode:
    """A passed episode: read a file (with ``read_arguments``), run the tests, answer. The
    environment reported every call ``ok``: the check, not the environment, judges."""
    calls = [ToolCall("c0", "read_file", read_arguments), ToolCall("c1", "run_tests", "{}")]
    results = [
        ToolResult("c0", "def f(): ...", "ok"),
        ToolResult("c1", "1 passed", "ok", tests_run=True, tests_passed=True),
    ]
    steps = (
        AgentStep(0, "", (calls[0],), (results[0],)),
        AgentStep(1, "", (calls[1],), (results[1],)),
        AgentStep(2, "Done: the tests pass."),
    )
    messages: list[Message] = [
        {"role": "system", "content": TASK.system_prompt},
        {"role": "user", "content": TASK.prompt},
    ]
    for call, result in zip(calls, results, strict=True):
        messages.append(
            {"role": "assistant", "content": "", "tool_calls": [call.as_message_entry()]}
        )
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result.text})
    messages.append({"role": "assistant", "content": "Done: the tests pass."})
    verdict = Verdict(True, "ok")
    return AgentEpisode(TASK, steps, "Done: the tests pass.", "answered", (), verdict, messages)


CLEAN = _episode('{"path": "app.py"}')
AGAINST_SCHEMA = _episode('{"file": "app.py"}')


def _export_row(episode: AgentEpisode) -> dict[str, Any]:
    """The ``episode_sft`` export's row shape (no environment status in it)."""
    return {"messages": trl_messages(episode.messages), "tools": episode.task.tool_list()}


def test_a_clean_episode_is_valid_everywhere() -> None:
    figures = evaluate_episodes("v", [CLEAN])
    assert (figures.tool_calls, figures.valid_calls) == (2, 2)
    assert audit_broken_calls(CLEAN) is None
    assert [o.accepted for o in episode_step_outcomes([CLEAN])] == [True, True, True]
    assert episode_reward(CLEAN, REWARD).penalties == ()
    assert failing_steps(CLEAN) == {}
    assert episode_sft_row(CLEAN) is not None
    assert len(row_examples(_export_row(CLEAN))) == 3


def test_a_call_against_its_schema_is_broken_for_the_gate_and_the_trainers_alike() -> None:
    figures = evaluate_episodes("v", [AGAINST_SCHEMA])
    assert (figures.tool_calls, figures.valid_calls) == (2, 1)  # the gate counts it invalid
    finding = audit_broken_calls(AGAINST_SCHEMA)
    assert finding is not None and "read_file: schema: " in finding.reason
    assert [o.accepted for o in episode_step_outcomes([AGAINST_SCHEMA])] == [False, True, True]
    # the reward: the schema problem is the invalid_arguments penalty
    reward = episode_reward(AGAINST_SCHEMA, REWARD)
    assert [(p.step, p.call_id, p.kind) for p in reward.penalties] == [
        (0, "c0", "invalid_arguments")
    ]
    assert reward.total == REWARD.accepted + REWARD.invalid_arguments
    # self-distillation hints the step
    assert failing_steps(AGAINST_SCHEMA) == {
        0: "Hint: the tool `read_file` takes a JSON object with `path`."
    }
    # distillation: no row from the played episode, no examples from the exported row
    assert episode_sft_row(AGAINST_SCHEMA) is None
    assert row_examples(_export_row(AGAINST_SCHEMA)) == []


def test_tools_in_the_flat_shape_are_read_alike() -> None:
    flat = tuple({"type": "function", **t["function"]} for t in TOOLS)
    task = TaskSpec("t1", "fix_bug", "Fix the bug.", "You are an agent.", flat)
    for episode, valid, examples in ((CLEAN, 2, 3), (AGAINST_SCHEMA, 1, 0)):
        same = replace(episode, task=task)
        assert evaluate_episodes("v", [same]).valid_calls == valid
        assert episode_reward(same, REWARD) == episode_reward(episode, REWARD)
        assert failing_steps(same) == failing_steps(episode)
        assert len(row_examples(_export_row(same))) == examples
