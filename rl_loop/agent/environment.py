"""The environment an agent policy plays in: a task workspace behind four operations.

The RL loop never imports a sandbox; the driver passes an :class:`AgentEnvironment` in (the task
library's agent sandbox satisfies it through ``rl_loop/agent/sandbox_environment.py``). A
workspace is opened per episode and closed after it; its operations never raise for what the
model sent (a broken call is an ``invalid`` :class:`~rl_loop.agent.episode.ToolResult`).
"""

from __future__ import annotations

from typing import Protocol

from rl_loop.agent.episode import FileChange, TaskSpec, ToolCall, ToolResult, Verdict


class TaskWorkspace(Protocol):
    """One episode's workspace."""

    @property
    def task(self) -> TaskSpec:
        """The task being played (prompt, tools, its test files)."""
        ...

    def execute(self, call: ToolCall) -> ToolResult:
        """Run one tool call, bounded by the environment's limits."""
        ...

    def verify(self, final_text: str) -> Verdict:
        """Judge the episode from the workspace's state and the final reply, with the task's
        pristine tests (whatever the agent did to its copies)."""
        ...

    def changes(self) -> list[FileChange]:
        """Files added, modified or deleted relative to the task's repository."""
        ...

    def close(self) -> None: ...


class AgentEnvironment(Protocol):
    """Where tasks are played: opens a fresh workspace for a task id."""

    def open(self, task_id: str) -> TaskWorkspace: ...
