"""Distillation on the frontier's successful agent trajectories, through the loop's TRL SFT
trainer (``rl_loop.trainers.sft``).

Data. The ``episode_sft`` export (``traffic.export.episode_export``, ``--sft-route frontier``:
accepted, complete episodes every step of which the frontier served, without a broken call):
``{"messages": [...], "tools": [...]}`` in TRL's conversational tool-calling shape. Rows are
checked again here (a broken call, as ``traffic.tool_calls.check_call`` judges it: not an
offered tool, or arguments that are not a JSON object valid against the tool's schema, drops
the row), and :func:`episode_sft_row` gives the same row for an episode played in the
environment (a scripted or served agent's passed episodes without a broken call).

Examples. Each assistant turn of an episode is one prompt-completion example: the conversation
before it as the prompt, the turn (its text and tool calls) as the completion. The SFT trainer
renders both with the checkpoint's chat template (tools in the system turn, earlier calls and
tool results as the template writes them) and keeps the loss on the completion alone, so every
assistant turn of the trajectory is trained, tool calls included, and nothing else is. Call
arguments are passed as JSON text (the template writes them as they are; a table of calls whose
argument objects differ would otherwise be padded with nulls by Arrow).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rl_loop.agent.episode import AgentEpisode, ToolCall
from rl_loop.config import SftConfig
from rl_loop.datasets import SftExample
from rl_loop.modeling import Policy
from rl_loop.trainers.engine import PhaseStats
from rl_loop.trainers.sft import train_sft
from traffic.export.episode_export import trl_messages
from traffic.tool_calls import first_problem


def load_episode_sft(path: Path) -> list[dict[str, Any]]:
    """The rows of an ``episode_sft`` JSONL export file (``train.jsonl`` / ``eval.jsonl``)."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def episode_sft_row(episode: AgentEpisode) -> dict[str, Any] | None:
    """A passed episode without a broken call as an ``episode_sft`` row, else None."""
    if not episode.passed or episode.ended != "answered":
        return None
    if first_problem((call for call, _ in episode.calls), episode.task.tools) is not None:
        return None
    return {"messages": trl_messages(episode.messages), "tools": episode.task.tool_list()}


def _text_arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    function = dict(call["function"])
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        function["arguments"] = json.dumps(arguments if arguments is not None else {})
    return {**call, "function": function}


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(message)
    if out.get("tool_calls"):
        out["tool_calls"] = [_text_arguments(c) for c in out["tool_calls"]]
    return out


def _calls(messages: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
    """The tool calls of ``messages`` (their arguments as text, :func:`_message`'s); a name that
    is not a string is read as none (no tool is offered without one)."""
    out = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call["function"]
            name = function.get("name")
            arguments = function.get("arguments")
            out.append(
                ToolCall(
                    str(call.get("id") or ""),
                    name if isinstance(name, str) else "",
                    arguments if isinstance(arguments, str) else json.dumps(arguments),
                )
            )
    return out


def row_examples(row: Mapping[str, Any]) -> list[SftExample]:
    """Each assistant turn of an ``episode_sft`` row as one example (none when a call of the
    row is broken)."""
    tools = [dict(t) for t in row.get("tools") or []]
    messages = [_message(m) for m in row["messages"]]
    if first_problem(_calls(messages), tools) is not None:
        return []
    out = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        calls = message.get("tool_calls") or None
        if not (isinstance(content, str) and content) and not calls:
            continue
        text = content if isinstance(content, str) else ""
        out.append(SftExample(messages[:index], text, tools or None, calls))
    return out


def distillation_examples(rows: Iterable[Mapping[str, Any]]) -> list[SftExample]:
    """Every assistant turn of every usable row."""
    return [example for row in rows for example in row_examples(row)]


def train_distill(
    policy: Policy,
    rows: Iterable[Mapping[str, Any]],
    config: SftConfig,
    *,
    output_dir: Path,
    seed: int = 0,
    device: str = "cpu",
    max_length: int | None = None,
    replay: torch.Tensor | None = None,
) -> PhaseStats:
    """SFT of ``policy`` on the assistant turns of ``rows`` (the loop's SFT trainer):
    ``config.replay_windows`` rows of ``replay`` (token windows: the code corpus, or copy
    windows) are trained beside them with the plain LM loss each step; none without it."""
    examples = distillation_examples(rows)
    stats, _ = train_sft(
        policy,
        examples,
        config,
        output_dir=output_dir,
        seed=seed,
        device=device,
        max_length=max_length,
        replay=replay,
    )
    return stats
