"""The agent gate's held-out episodes, played in the real sandbox, become routing evidence: one
local outcome per step, read as the gateway reads a live agent step and judged as the refit's
episode credit judges one (a broken call rejected, else the episode's verdict)."""

from __future__ import annotations

import pytest

from rl_loop.agent.runner import play_episode
from rl_loop.agent.sandbox_environment import SandboxEnvironment
from rl_loop.agent_evidence import episode_step_outcomes
from router.chat_text import request_text
from tasks.agent.sandbox import SandboxRunner
from tasks.agent.tasks import AgentTask, make_agent_task
from tasks.ide.task import HELDOUT_SEED_START
from tests.rl_loop.agent.scripted import HACKS, Script, ScriptedPolicy, flawed_on, honest

TASK = make_agent_task("fix_bug", HELDOUT_SEED_START + 13)


@pytest.fixture(scope="module")
def runner() -> SandboxRunner:
    return SandboxRunner.create()


def _play(runner: SandboxRunner, task: AgentTask, script: Script):  # type: ignore[no-untyped-def]
    policy = ScriptedPolicy([task], script)
    return play_episode(policy, SandboxEnvironment(runner), task.task_id, max_steps=12)


def test_each_step_of_a_passed_episode_is_an_accepted_tool_step(runner: SandboxRunner) -> None:
    episode = _play(runner, TASK, honest)
    assert episode.passed
    outcomes = episode_step_outcomes([episode])
    assert len(outcomes) == len(episode.steps)
    assert {(o.class_key, o.arm, o.accepted) for o in outcomes} == {("*|tools", "local", True)}
    # the first step reads as the live request that opens the episode reads
    first = episode.messages[:2]
    live = request_text("chat.completions", {"messages": first, "tools": episode.task.tool_list()})
    assert outcomes[0].text == live
    assert [o.text.step for o in outcomes if o.text] == list(range(len(outcomes)))


def test_a_failed_episode_rejects_every_step(runner: SandboxRunner) -> None:
    episode = _play(runner, TASK, flawed_on("fix_bug"))
    assert not episode.passed
    assert not any(o.accepted for o in episode_step_outcomes([episode]))


def test_a_broken_call_is_rejected_even_when_the_episode_passes(runner: SandboxRunner) -> None:
    script, _, _ = HACKS["broken_calls"]
    episode = _play(runner, TASK, script)
    assert episode.passed
    verdicts = [o.accepted for o in episode_step_outcomes([episode])]
    assert verdicts.count(False) == 2 and verdicts.count(True) == len(verdicts) - 2
