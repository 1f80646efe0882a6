"""Playing one episode of a policy in an environment.

:class:`AgentPolicy` has one method, ``act(messages, tools)``: the next assistant message (text
and tool calls) given the conversation so far in Chat Completions' shape. :func:`play_episode`
opens the task's workspace, starts the conversation with the task's system prompt and request,
and loops: the policy acts; each of its tool calls runs in the workspace and its result goes
back as a ``tool`` message; an answer without tool calls ends the episode. At most
``max_steps`` assistant turns; the verifier judges whatever state the workspace is left in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rl_loop.agent.environment import AgentEnvironment
from rl_loop.agent.episode import (
    AgentEpisode,
    AgentStep,
    ContextExhausted,
    EndReason,
    Message,
    ToolCall,
    ToolResult,
)


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """One assistant turn: its text and the tool calls it makes."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    def as_message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [c.as_message_entry() for c in self.tool_calls]
        return message


class AgentPolicy(Protocol):
    """Anything that plays an agent: a checkpoint, a scripted agent, a served model."""

    def act(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> AssistantMessage:
        """The next assistant turn given the conversation (Chat Completions' shape)."""
        ...


def play_episode(
    policy: AgentPolicy, environment: AgentEnvironment, task_id: str, *, max_steps: int
) -> AgentEpisode:
    """One episode of ``policy`` on ``task_id`` (see the module docstring)."""
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
    workspace = environment.open(task_id)
    try:
        task = workspace.task
        tools = task.tool_list()
        messages: list[Message] = [
            {"role": "system", "content": task.system_prompt},
            {"role": "user", "content": task.prompt},
        ]
        steps: list[AgentStep] = []
        final_text = ""
        ended: EndReason = "step_limit"
        for index in range(max_steps):
            try:
                turn = policy.act(messages, tools)
            except ContextExhausted:
                ended = "context_limit"
                break
            messages.append(turn.as_message())
            results: list[ToolResult] = []
            for call in turn.tool_calls:
                result = workspace.execute(call)
                results.append(result)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result.text})
            steps.append(AgentStep(index, turn.content, turn.tool_calls, tuple(results)))
            if not turn.tool_calls:
                final_text, ended = turn.content, "answered"
                break
        verdict = workspace.verify(final_text)
        changes = tuple(workspace.changes())
    finally:
        workspace.close()
    return AgentEpisode(task, tuple(steps), final_text, ended, changes, verdict, messages)


def play_episodes(
    policy: AgentPolicy,
    environment: AgentEnvironment,
    task_ids: Sequence[str],
    *,
    max_steps: int,
) -> list[AgentEpisode]:
    """One episode per task id, in order."""
    return [play_episode(policy, environment, t, max_steps=max_steps) for t in task_ids]
