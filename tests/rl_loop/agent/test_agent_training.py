"""Training on agent episodes with real optimizer steps on the tiny demo model (CPU): distillation
on a competent agent's passed trajectories, on-policy RL on whole episodes with step penalties,
and hint self-distillation at the steps that went wrong. Episodes are played in the real sandbox
on real agent tasks (the competent agent is the frontier simulator's plan, ``scripted.py``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from rl_loop.agent.distill import episode_sft_row, row_examples, train_distill
from rl_loop.agent.episode import AgentEpisode
from rl_loop.agent.episode_rl import (
    EpisodeRewardConfig,
    RecordingPolicy,
    episode_advantages,
    episode_reward,
    play_groups,
    scored_episode,
    train_episode_rl,
)
from rl_loop.agent.runner import play_episode
from rl_loop.agent.sandbox_environment import SandboxEnvironment
from rl_loop.agent.self_distill import (
    failing_steps,
    hint_gap,
    hinted_rollouts,
    train_episode_rl_with_hints,
    train_self_distill,
)
from rl_loop.config import RlConfig, SftConfig
from rl_loop.modeling import Policy, load_policy
from serving.build import ensure_demo_model
from tasks.agent.sandbox import SandboxRunner
from tasks.agent.tasks import AgentTask, make_agent_task
from tasks.agent.tools import Flavour
from tests.fixtures.vllm_fixture import cache_dir
from tests.rl_loop.agent.scripted import HACKS, Move, ScriptedPolicy, _calls, flawed_on, honest

REWARD = EpisodeRewardConfig()


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    return ensure_demo_model(cache_dir())


@pytest.fixture(scope="module")
def environment() -> SandboxEnvironment:
    return SandboxEnvironment(SandboxRunner.create())


def _play(task: AgentTask, script: object, env: SandboxEnvironment) -> AgentEpisode:
    policy = ScriptedPolicy([task], script)  # type: ignore[arg-type]
    return play_episode(policy, env, task.task_id, max_steps=12)


def _weights(policy: Policy) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in policy.model.parameters()])


def test_distillation_trains_every_assistant_turn_of_passed_trajectories(
    tiny_model: Path, environment: SandboxEnvironment, tmp_path: Path
) -> None:
    tasks = [make_agent_task("fix_bug", 11), make_agent_task("find_definition", 12)]
    episodes = [_play(t, honest, environment) for t in tasks]
    assert all(e.passed for e in episodes)
    rows = [episode_sft_row(e) for e in episodes]
    assert all(r is not None for r in rows)
    failed = _play(make_agent_task("fix_bug", 13), flawed_on("fix_bug"), environment)
    assert not failed.passed and episode_sft_row(failed) is None
    usable = [r for r in rows if r is not None]
    examples = [ex for r in usable for ex in row_examples(r)]
    assert len(examples) == sum(len(e.steps) for e in episodes)
    edit = next(ex for ex in examples if ex.tool_calls and "edit" in json.dumps(ex.tool_calls))
    assert isinstance(edit.tool_calls[0]["function"]["arguments"], str)  # type: ignore[index]
    policy = load_policy(tiny_model)
    # the checkpoint's template renders the tools, the earlier calls and the tool results
    text = policy.tokenizer.decode(list(policy.encode_prompt(edit.prompt, edit.tools)))
    assert "<tools>" in text and "<tool_call>" in text and "<tool_response>" in text
    before = _weights(policy)
    config = SftConfig(steps=3, batch_size=2, lr=1e-3, warmup_steps=0, replay_windows=0)
    stats = train_distill(policy, usable, config, output_dir=tmp_path)
    assert stats.steps == 3 and stats.examples == len(examples)
    assert all(math.isfinite(v) for v in stats.losses)
    assert not torch.equal(before, _weights(policy))


def _repeat_first_call(task: AgentTask, flavour: Flavour) -> list[Move]:
    calls = _calls(task, flavour)
    return [calls[0], *honest(task, flavour)]


def test_the_episode_reward_counts_broken_and_wasted_calls(
    environment: SandboxEnvironment,
) -> None:
    task = make_agent_task("fix_bug", 21)
    clean = _play(task, honest, environment)
    broken = _play(task, HACKS["broken_calls"][0], environment)
    repeated = _play(task, _repeat_first_call, environment)
    assert clean.passed and broken.passed and repeated.passed
    assert episode_reward(clean, REWARD).penalties == ()
    broken_reward = episode_reward(broken, REWARD)
    assert {p.kind for p in broken_reward.penalties} == {"malformed_arguments", "unknown_tool"}
    assert broken_reward.total < episode_reward(clean, REWARD).total
    repeated_reward = episode_reward(repeated, REWARD)
    assert [p.kind for p in repeated_reward.penalties] == ["no_effect"]
    assert repeated_reward.total < episode_reward(clean, REWARD).total
    failed = _play(task, flawed_on("fix_bug"), environment)
    assert episode_reward(failed, REWARD).total == REWARD.rejected


def test_episode_rl_steps_on_whole_episodes_with_a_group_baseline(
    tiny_model: Path, environment: SandboxEnvironment, tmp_path: Path
) -> None:
    task = make_agent_task("find_definition", 31)
    policy = load_policy(tiny_model)
    player = RecordingPolicy(policy, max_new_tokens=24, temperature=1.0, seed=5)
    played = play_groups(
        player, environment, [task.task_id], group_size=2, max_steps=2, reward=REWARD
    )
    for p in played:
        assert len(p.turns) == len(p.episode.steps) >= 1
        assert p.turns[0].completion_ids  # the ids the policy generated, with its logprobs
        assert p.logprobs is not None and len(p.logprobs[0]) == len(p.turns[0].completion_ids)
    # the competent agent's episode of the same task joins the group: the baseline separates it
    played.append(scored_episode(policy, _play(task, honest, environment), REWARD))
    advantages = episode_advantages(played)
    assert advantages[-1] > 0 and abs(sum(advantages)) < 1e-9
    before = _weights(policy)
    config = RlConfig(steps=2, batch_size=2, lr=1e-3, kl_coef=0.05)
    stats = train_episode_rl(policy, played, config, output_dir=tmp_path)
    assert stats.steps == 2 and all(math.isfinite(v) for v in stats.losses)
    assert stats.extra["episodes"] == 3.0 and stats.extra["success_rate"] == pytest.approx(1 / 3)
    assert not torch.equal(before, _weights(policy))
    # one phase of both: the policy gradient and the hints at the episodes' failing steps
    both = RlConfig(steps=1, batch_size=4, lr=1e-3, hint_weight=1.0)
    stats = train_episode_rl_with_hints(policy, played, both, output_dir=tmp_path / "both")
    assert stats.steps == 1 and all(math.isfinite(v) for v in stats.losses)


def test_self_distillation_brings_the_student_to_the_hinted_teacher(
    tiny_model: Path, environment: SandboxEnvironment, tmp_path: Path
) -> None:
    task = make_agent_task("fix_bug", 41)
    broken = _play(task, HACKS["broken_calls"][0], environment)
    hints = failing_steps(broken)
    assert sorted(hints) == [0, 1]
    assert "`read_file` takes a JSON object with `path`" in hints[0]
    assert "there is no tool `open_file`" in hints[1]
    failed = _play(make_agent_task("fix_bug", 42), flawed_on("fix_bug"), environment)
    feedback_hints = failing_steps(failed)
    assert any("not done yet" in h for h in feedback_hints.values())
    policy = load_policy(tiny_model)
    rollouts = hinted_rollouts(policy, broken) + hinted_rollouts(policy, failed)
    assert len(rollouts) == 3
    teacher = policy.clone()
    gap_before = hint_gap(policy, teacher, rollouts)
    assert gap_before > 0
    # Adam moves every weight by ~lr per step while the hinted teacher differs little from the
    # student on this small model: a small rate, or the steps overshoot the tiny gap.
    config = RlConfig(steps=6, batch_size=3, lr=1e-5, kl_coef=0.0, hint_weight=1.0)
    stats = train_self_distill(policy, rollouts, config, output_dir=tmp_path, teacher=teacher)
    assert stats.steps == 6 and all(math.isfinite(v) for v in stats.losses)
    assert hint_gap(policy, teacher, rollouts) < gap_before
