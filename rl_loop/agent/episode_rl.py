"""On-policy RL on whole agent episodes: the policy plays tasks in the environment, each episode
is rewarded by its verdict and its clean execution, and every assistant token of the episode is
trained with the episode's group advantage.

Reward. ``accepted`` / ``rejected`` (``rl_loop.rewards``' scale) for the terminal verdict, plus
one penalty per wasted or broken call (:func:`call_penalties`). A broken call is what
``traffic.tool_calls.check_call`` says it is (the gate's, the audits' and the gateway's check,
whatever the environment reported): its ``unknown_tool`` problem is the ``unknown_tool``
penalty, ``malformed_arguments`` (not one JSON object) the ``malformed_arguments`` one, and a
``schema`` violation (a JSON object against the tool's schema) the ``invalid_arguments`` one. A
valid call is penalized when it changes nothing: an edit tool whose result changed no file, or a
call identical to an earlier one (same tool, same arguments) with no workspace change in between
(re-running the tests after an edit is not a repeat). The penalties' sum is floored at
``-max_penalty``.

Advantage. Several episodes of one task form a group; an episode's advantage is its reward
minus the group's mean (``rl_loop.losses.group_advantages``, over episodes, not steps), and each
of its assistant turns is one training item carrying that advantage. A group whose episodes all
scored the same teaches nothing.

Tokens. :class:`RecordingPolicy` plays like ``CheckpointPolicy`` and keeps each turn's exact
prompt and generated ids; episodes played by another policy (scripted, served) are re-rendered
with the checkpoint's chat template (:func:`episode_turns`). The sampler is the policy's own
weights: :func:`play_groups` scores each turn's tokens with them right after the episode (the
rollout logprobs, so the truncated IS ratio follows the weights' drift over the phase's steps);
a re-rendered episode has none (NaN: an IS ratio of 1). The step and loss are
``rl_loop.trainers.onpolicy``'s (``OnPolicyTrainer``: truncated IS, k3 KL to the frozen
reference, hint self-distillation).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from rl_loop.agent.checkpoint_policy import CheckpointPolicy
from rl_loop.agent.environment import AgentEnvironment
from rl_loop.agent.episode import AgentEpisode, ToolCall
from rl_loop.agent.runner import play_episode
from rl_loop.config import RlConfig
from rl_loop.losses import group_advantages
from rl_loop.modeling import Encoded, Policy
from rl_loop.rewards import ACCEPTED, REJECTED
from rl_loop.rollouts import Rollout
from rl_loop.scoring import label_logprobs, make_batch
from rl_loop.trainers.engine import PhaseStats
from rl_loop.trainers.onpolicy import train_items
from serving.tokenizer import IM_END
from traffic.tool_calls import ProblemKind, check_calls

PenaltyKind = Literal["unknown_tool", "malformed_arguments", "invalid_arguments", "no_effect"]


class EpisodeRewardConfig(BaseModel):
    """An episode's reward: the verdict plus penalties for wasted or broken calls."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accepted: float = Field(default=ACCEPTED, description="Terminal reward of a passed episode.")
    rejected: float = Field(default=REJECTED, description="Terminal reward of a failed episode.")
    unknown_tool: float = Field(default=-0.2, le=0, description="A call to a tool not offered.")
    malformed_arguments: float = Field(
        default=-0.2, le=0, description="Arguments that are not one JSON object."
    )
    invalid_arguments: float = Field(
        default=-0.1, le=0, description="A JSON object against the tool's schema."
    )
    no_effect: float = Field(
        default=-0.1,
        le=0,
        description="An edit that changed no file, or a repeat of an identical call with no "
        "workspace change in between.",
    )
    max_penalty: float = Field(
        default=1.0, ge=0, description="The penalties' sum is floored at minus this."
    )
    edit_tools: tuple[str, ...] = Field(
        default=("edit", "apply_patch"), description="Tools whose purpose is to change files."
    )


@dataclass(frozen=True, slots=True)
class CallPenalty:
    """One penalized call: the step it was made in, its id and why."""

    step: int
    call_id: str
    kind: PenaltyKind
    value: float


@dataclass(frozen=True, slots=True)
class EpisodeReward:
    terminal: float
    penalties: tuple[CallPenalty, ...]
    total: float


_PENALTY_OF: dict[ProblemKind, PenaltyKind] = {
    "unknown_tool": "unknown_tool",
    "malformed_arguments": "malformed_arguments",
    "schema": "invalid_arguments",
}


def _repeat_key(call: ToolCall) -> tuple[str, str]:
    """A valid call's identity for the repeat test: its tool and its arguments as canonical
    JSON (a valid call's arguments are one JSON object, empty text ``{}``)."""
    parsed = json.loads(call.arguments) if call.arguments.strip() else {}
    return call.name, json.dumps(parsed, sort_keys=True)


def call_penalties(episode: AgentEpisode, config: EpisodeRewardConfig) -> list[CallPenalty]:
    """Every wasted or broken call of ``episode`` (see the module docstring)."""
    seen: set[tuple[str, str]] = set()
    out: list[CallPenalty] = []
    for step in episode.steps:
        checks = check_calls(step.calls, episode.task.tools)
        for call, check, result in zip(step.calls, checks, step.results, strict=True):
            kind: PenaltyKind | None = None
            if check.kind is not None:
                kind = _PENALTY_OF[check.kind]
            else:
                key = _repeat_key(call)
                if (call.name in config.edit_tools and not result.changed) or key in seen:
                    kind = "no_effect"
                seen.add(key)
            if kind is not None:
                out.append(CallPenalty(step.index, call.id, kind, getattr(config, kind)))
            if result.changed:
                seen = set()
    return out


def episode_reward(episode: AgentEpisode, config: EpisodeRewardConfig) -> EpisodeReward:
    """The terminal reward plus the (floored) penalties of the episode's calls."""
    terminal = config.accepted if episode.passed else config.rejected
    penalties = call_penalties(episode, config)
    penalty = max(sum(p.value for p in penalties), -config.max_penalty)
    return EpisodeReward(terminal, tuple(penalties), terminal + penalty)


# ---------------------------------------------------------------- tokens of each turn


class RecordingPolicy(CheckpointPolicy):
    """A checkpoint policy that keeps the exact prompt and generated ids of each turn of the
    episode being played (``turns``; a new episode starts when the conversation has no
    assistant turn yet)."""

    def __init__(self, policy: Policy, **kwargs: Any) -> None:
        super().__init__(policy, **kwargs)
        self.turns: list[Encoded] = []

    def generate_turn(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if not any(m.get("role") == "assistant" for m in messages):
            self.turns = []
        prompt, ids = super().generate_turn(messages, tools)
        self.turns.append(Encoded(prompt, ids))
        return prompt, ids


def _render(policy: Policy, messages: Sequence[Mapping[str, Any]], tools: Any, gen: bool) -> str:
    text = policy.tokenizer.apply_chat_template(
        [dict(m) for m in messages], tools=tools, tokenize=False, add_generation_prompt=gen
    )
    assert isinstance(text, str)
    return text


def turn_tokens(
    policy: Policy, messages: Sequence[Mapping[str, Any]], index: int, tools: Any
) -> Encoded:
    """The assistant turn ``messages[index]`` as the model would produce it after the prompt
    ``messages[:index]``: the chat template's rendering of the turn, tokenized apart from the
    prompt, ending at ``<|im_end|>``."""
    prompt_text = _render(policy, messages[:index], tools, True)
    full = _render(policy, messages[: index + 1], tools, False)
    if not full.startswith(prompt_text):
        raise ValueError(f"the template does not render turn {index} after its prompt")
    answer = full[len(prompt_text) :].split(IM_END, 1)[0]
    return Encoded(policy.encode_prompt(messages[:index], tools), policy.encode_completion(answer))


def episode_turns(policy: Policy, episode: AgentEpisode) -> list[Encoded]:
    """Each assistant turn of ``episode`` re-rendered with ``policy``'s chat template."""
    tools = episode.task.tool_list() or None
    indices = [i for i, m in enumerate(episode.messages) if m["role"] == "assistant"]
    return [turn_tokens(policy, episode.messages, i, tools) for i in indices]


# ---------------------------------------------------------------- playing and training


@dataclass(frozen=True, slots=True)
class PlayedEpisode:
    """An episode, the tokens of each of its assistant turns and its reward."""

    episode: AgentEpisode
    turns: tuple[Encoded, ...]
    reward: EpisodeReward
    logprobs: tuple[tuple[float, ...], ...] | None = None  # the sampler's, per turn token


@torch.no_grad()
def sampler_logprobs(policy: Policy, turns: Sequence[Encoded]) -> tuple[tuple[float, ...], ...]:
    """Each turn's completion tokens scored by ``policy`` (the weights that sampled them)."""
    out = []
    for turn in turns:
        batch = make_batch([turn], policy.pad_id, policy.device)
        values = label_logprobs(policy.model, batch)[0][batch.mask[0]]
        out.append(tuple(float(v) for v in values.tolist()))
    return tuple(out)


def play_groups(
    policy: RecordingPolicy,
    environment: AgentEnvironment,
    task_ids: Sequence[str],
    *,
    group_size: int,
    max_steps: int,
    reward: EpisodeRewardConfig,
) -> list[PlayedEpisode]:
    """``group_size`` episodes of each task (sample with ``policy.temperature`` > 0)."""
    out = []
    for task_id in task_ids:
        for _ in range(group_size):
            episode = play_episode(policy, environment, task_id, max_steps=max_steps)
            turns = tuple(policy.turns[: len(episode.steps)])
            logprobs = sampler_logprobs(policy.policy, turns)
            out.append(PlayedEpisode(episode, turns, episode_reward(episode, reward), logprobs))
    return out


def scored_episode(
    policy: Policy, episode: AgentEpisode, reward: EpisodeRewardConfig
) -> PlayedEpisode:
    """An episode another policy played, with its turns re-rendered for ``policy``."""
    return PlayedEpisode(
        episode, tuple(episode_turns(policy, episode)), episode_reward(episode, reward)
    )


def episode_advantages(played: Sequence[PlayedEpisode]) -> list[float]:
    """Each episode's reward minus its task group's mean."""
    per_episode = [
        Rollout((), (), (), p.episode.task.task_id, p.reward.total) for p in played
    ]  # fmt: skip
    return group_advantages(per_episode)


def episode_items(played: Sequence[PlayedEpisode]) -> list[dict[str, Any]]:
    """The on-policy trainer's items: every assistant turn of every episode with a non-zero
    group advantage."""
    items = []
    for p, advantage in zip(played, episode_advantages(played), strict=True):
        if abs(advantage) <= 1e-9:
            continue
        for k, turn in enumerate(p.turns):
            unknown = (math.nan,) * len(turn.completion_ids)
            rollout = Rollout(
                turn.prompt_ids,
                turn.completion_ids,
                p.logprobs[k] if p.logprobs is not None else unknown,
                p.episode.task.task_id,
                p.reward.total,
            )
            items.append({"rollout": rollout, "advantage": advantage, "hinted": False})
    return items


def train_episode_rl(
    policy: Policy,
    played: Sequence[PlayedEpisode],
    config: RlConfig,
    *,
    output_dir: Path,
    reference: Policy | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> PhaseStats:
    """One RL phase on played episodes (``reference``: the KL anchor, a frozen copy of the
    policy when not given)."""
    items = episode_items(played)
    anchor = reference if reference is not None else policy.clone()
    stats, _ = train_items(
        policy, anchor, items, config, output_dir=output_dir, seed=seed, device=device
    )
    rewards = [p.reward.total for p in played]
    stats.extra.update(
        episodes=float(len(played)),
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
        success_rate=sum(p.episode.passed for p in played) / len(played) if played else 0.0,
        penalized_calls=float(sum(len(p.reward.penalties) for p in played)),
    )
    return stats
