"""Targeted self-distillation at the steps of an episode that went wrong.

A failing step (:func:`failing_steps`) gets a short textual hint:

- a step with a broken call (``traffic.tool_calls.check_call``'s judgement, the gate's and the
  reward's): what the tool takes (``Hint: the tool `edit` takes a JSON object with `path`,
  `old_string`, `new_string`.``), or which tools exist for an unknown one;
- in an episode the verifier rejected: the verifier's feedback (the failing test's message), on
  the step after the last test run that failed, else on the episode's last step.

The hint is inserted into the context right before the step as a user message. The teacher is
the same weights given the hint (a frozen copy of the policy at the start of the phase, no
gradient); its next-token distributions on the step's own tokens are the target of the un-hinted
policy on that step: ``KL(teacher(. | context + hint, y<t) || policy(. | context, y<t))`` over
the whole vocabulary, on the step's tokens only. The loss and step are
``rl_loop.trainers.onpolicy``'s hint term (``rl_loop.losses.hint_kl``); items carry no
advantage, so only that term trains.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rl_loop.agent.episode import AgentEpisode, Message
from rl_loop.agent.episode_rl import PlayedEpisode, episode_items, episode_turns
from rl_loop.config import RlConfig
from rl_loop.losses import hint_kl
from rl_loop.modeling import Encoded, Policy
from rl_loop.rollouts import Rollout
from rl_loop.scoring import make_batch, score
from rl_loop.trainers.engine import PhaseStats
from rl_loop.trainers.onpolicy import train_items
from traffic.tool_calls import check_call, offered_functions

FEEDBACK_CHARS = 400


def _schema_hint(name: str, functions: Sequence[Mapping[str, Any]]) -> str:
    """``functions``: the offered tools as ``traffic.tool_calls.offered_functions`` gives them."""
    for tool in functions:
        function = tool["function"]
        if function["name"] == name:
            parameters = function.get("parameters") or {}
            keys = list(parameters.get("required") or parameters.get("properties") or [])
            listed = ", ".join(f"`{k}`" for k in keys) or "no arguments"
            return f"Hint: the tool `{name}` takes a JSON object with {listed}."
    names = ", ".join(f"`{n}`" for n in sorted(t["function"]["name"] for t in functions))
    return f"Hint: there is no tool `{name}`; the tools are {names}."


def failing_steps(episode: AgentEpisode) -> dict[int, str]:
    """Step index -> the hint for that step (see the module docstring)."""
    functions = offered_functions(episode.task.tools)
    hints: dict[int, list[str]] = {}
    last_failed_run: int | None = None
    for step in episode.steps:
        checks = [check_call(c.id, c.name, c.arguments, functions) for c in step.calls]
        for call, check, result in zip(step.calls, checks, step.results, strict=True):
            if not check.valid:
                hint = _schema_hint(call.name, functions)
                if hint not in hints.get(step.index, []):
                    hints.setdefault(step.index, []).append(hint)
            if result.tests_run and result.tests_passed is False:
                last_failed_run = step.index
    if not episode.passed and episode.steps:
        after = last_failed_run + 1 if last_failed_run is not None else len(episode.steps) - 1
        target = min(after, len(episode.steps) - 1)
        feedback = " ".join(episode.verdict.feedback.split())[:FEEDBACK_CHARS]
        hints.setdefault(target, []).append(f"Hint: the task is not done yet: {feedback}")
    return {index: " ".join(parts) for index, parts in sorted(hints.items())}


def insert_hint(prompt: Sequence[Mapping[str, Any]], hint: str) -> list[Message]:
    """``prompt`` (the messages before a step) with ``hint`` as a user message at its end."""
    return [*(dict(m) for m in prompt), {"role": "user", "content": hint}]


def hinted_rollouts(
    policy: Policy, episode: AgentEpisode, turns: Sequence[Encoded] | None = None
) -> list[Rollout]:
    """One rollout per failing step of ``episode``: the step's own tokens after its un-hinted
    prompt, and the hinted prompt as the teacher's context (``turns``: the step tokens as
    played, else re-rendered)."""
    hints = failing_steps(episode)
    if not hints:
        return []
    steps = list(turns) if turns is not None else episode_turns(policy, episode)
    assistant_at = [i for i, m in enumerate(episode.messages) if m["role"] == "assistant"]
    tools = episode.task.tool_list() or None
    out = []
    for index, hint in hints.items():
        if index >= len(steps) or index >= len(assistant_at):
            continue
        turn = steps[index]
        hinted = policy.encode_prompt(
            insert_hint(episode.messages[: assistant_at[index]], hint), tools
        )
        out.append(
            Rollout(
                turn.prompt_ids,
                turn.completion_ids,
                (math.nan,) * len(turn.completion_ids),
                group=f"{episode.task.task_id}:{index}",
                hint_prompt_ids=hinted,
            )
        )
    return out


def train_self_distill(
    policy: Policy,
    rollouts: Sequence[Rollout],
    config: RlConfig,
    *,
    output_dir: Path,
    teacher: Policy | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> PhaseStats:
    """Self-distillation steps on hinted rollouts (``config.hint_weight`` must be > 0; the
    teacher: a frozen copy of the policy when not given)."""
    if config.hint_weight <= 0:
        raise ValueError("self-distillation needs hint_weight > 0")
    items = [{"rollout": r, "advantage": 0.0, "hinted": True} for r in rollouts]
    frozen = teacher if teacher is not None else policy.clone()
    stats, _ = train_items(
        policy, frozen, items, config, output_dir=output_dir, seed=seed, device=device
    )
    return stats


def train_episode_rl_with_hints(
    policy: Policy,
    played: Sequence[PlayedEpisode],
    config: RlConfig,
    *,
    output_dir: Path,
    reference: Policy | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> PhaseStats:
    """One phase of both: the episodes' policy-gradient items (``episode_rl``) and, when
    ``config.hint_weight`` > 0, their failing steps with hints (the same frozen copy is the KL
    reference and the hinted teacher)."""
    items = episode_items(played)
    if config.hint_weight > 0:
        for p in played:
            for r in hinted_rollouts(policy, p.episode, p.turns):
                items.append({"rollout": r, "advantage": 0.0, "hinted": True})
    frozen = reference if reference is not None else policy.clone()
    stats, _ = train_items(
        policy, frozen, items, config, output_dir=output_dir, seed=seed, device=device
    )
    return stats


@torch.no_grad()
def hint_gap(student: Policy, teacher: Policy, rollouts: Sequence[Rollout]) -> float:
    """Mean over the rollouts of ``KL(teacher | hinted context || student | plain context)``
    on each step's tokens (what self-distillation lowers)."""
    values = []
    for r in rollouts:
        assert r.hint_prompt_ids is not None
        plain = make_batch(
            [Encoded(r.prompt_ids, r.completion_ids)], student.pad_id, student.device
        )
        hinted = make_batch(
            [Encoded(r.hint_prompt_ids, r.completion_ids)], teacher.pad_id, teacher.device
        )
        s = score(student.model, plain, log_dists=True).log_dists
        t = score(teacher.model, hinted, log_dists=True).log_dists
        assert s is not None and t is not None
        values.append(float(hint_kl(s, t).item()))
    return sum(values) / len(values) if values else 0.0
