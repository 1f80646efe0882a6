"""A policy backed by a local checkpoint: the tiny demo model plays a real agent episode in the
sandbox (it does not solve it; the episode is recorded and judged), and Qwen3 / hermes tool-call
output is parsed into calls the environment can run or reject."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_loop.agent.checkpoint_policy import CheckpointPolicy, parse_tool_calls
from rl_loop.agent.config import AgentGateConfig
from rl_loop.agent.gate import agent_gate, evaluate_episodes
from rl_loop.agent.runner import play_episode
from rl_loop.agent.sandbox_environment import SandboxEnvironment
from serving.build import ensure_demo_model
from tasks.agent.sandbox import SandboxRunner
from tasks.agent.tasks import make_agent_task
from tasks.ide.task import HELDOUT_SEED_START
from tests.fixtures.vllm_fixture import cache_dir


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    return ensure_demo_model(cache_dir())


def test_the_tiny_checkpoint_plays_one_episode_that_is_recorded_and_judged(
    tiny_model: Path,
) -> None:
    policy = CheckpointPolicy.from_checkpoint(tiny_model, max_new_tokens=48)
    task = make_agent_task("fix_bug", HELDOUT_SEED_START + 21)
    environment = SandboxEnvironment(SandboxRunner.create())
    episode = play_episode(policy, environment, task.task_id, max_steps=2)
    assert episode.task.task_id == task.task_id
    assert 1 <= len(episode.steps) <= 2
    assert episode.ended in ("answered", "step_limit")
    assert episode.messages[0]["role"] == "system" and episode.messages[1]["content"] == task.prompt
    assert [m["role"] for m in episode.messages[2:]].count("assistant") == len(episode.steps)
    assert episode.verdict.feedback  # judged: an untrained model leaves the test failing
    assert not episode.passed
    figures = evaluate_episodes("tiny", [episode])
    report = agent_gate(figures, figures, AgentGateConfig())
    assert report.candidate["episodes"] == 1 and report.candidate["success_rate"] == 0.0


def test_a_greedy_checkpoint_policy_is_deterministic(tiny_model: Path) -> None:
    policy = CheckpointPolicy.from_checkpoint(tiny_model, max_new_tokens=16)
    messages = [{"role": "user", "content": "Where is `mean` defined?"}]
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    assert policy.act(messages, tools).content == policy.act(messages, tools).content


def test_qwen3_tool_calls_are_parsed_with_their_text() -> None:
    text = (
        "<think>the test names the helper</think>Let me look.\n<tool_call>\n"
        '{"name": "read_file", "arguments": {"path": "acme/calc.py"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>'
    )
    turn = parse_tool_calls(text, "c")
    assert turn.content == "Let me look."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [
        ("c_0", "read_file", {"path": "acme/calc.py"}),
        ("c_1", "run_tests", {}),
    ]
    assert parse_tool_calls("`mean` is at acme/calc.py:3.").tool_calls == ()


def test_broken_and_cut_off_calls_are_kept_for_the_environment_to_reject() -> None:
    broken = parse_tool_calls('<tool_call>\n{"name": "edit", "arguments": {"path": </tool_call>')
    (call,) = broken.tool_calls
    assert call.name == "edit" and call.arguments.startswith('{"name": "edit"')
    cut = parse_tool_calls('Reading.\n<tool_call>\n{"name": "read_file", "argu')
    assert cut.content == "Reading." and cut.tool_calls[0].name == "read_file"
    nameless = parse_tool_calls("<tool_call>garbage</tool_call>")
    assert nameless.tool_calls[0].name == "" and nameless.tool_calls[0].arguments == "garbage"
    as_text = parse_tool_calls('<tool_call>{"name": "search", "arguments": "{\\"query\\": 1}"}'
                               "</tool_call>")  # fmt: skip
    assert as_text.tool_calls[0].arguments == '{"query": 1}'
