"""What one agent episode was: the task, every step, the workspace's changes and the verdict.

A step is one assistant turn: its text and its tool calls, each with the result the environment
sent back. The episode ends when the policy answers without a tool call (``answered``), when the
step limit is reached (``step_limit``) or when the conversation no longer fits the policy's
context (``context_limit``). ``messages`` is the whole conversation in Chat Completions' shape
(system, user, assistant with ``tool_calls``, ``tool``), what a trainer reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ToolStatus = Literal["ok", "error", "invalid"]
FileChangeKind = Literal["added", "modified", "deleted"]
EndReason = Literal["answered", "step_limit", "context_limit"]
Message = dict[str, Any]


class AgentError(Exception):
    """Base of the agent package's errors."""


class ContextExhausted(AgentError):
    """The conversation no longer fits the policy's context window."""


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What a policy and the audits may know of a task (never its solution).

    ``test_files`` are the task's own tests (what the verifier runs, pristine); ``needs_change``
    says whether the task is judged on the workspace (tests) rather than on the answer;
    ``needs_clarification`` whether asking the user is a legitimate move (none of the agent
    workload's tasks: every request is complete)."""

    task_id: str
    kind: str
    prompt: str
    system_prompt: str
    tools: tuple[Mapping[str, Any], ...]  # Chat Completions ``tools`` entries
    test_files: tuple[str, ...] = ()
    needs_change: bool = False
    needs_clarification: bool = False

    def tool_list(self) -> list[dict[str, Any]]:
        return [dict(t) for t in self.tools]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call as the model made it: ``arguments`` is the JSON text it produced."""

    id: str
    name: str
    arguments: str

    def as_message_entry(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the environment did with one call: the text sent back and what happened.

    ``invalid``: unknown tool or arguments against the schema (nothing ran); ``error``: a
    well-formed call that failed or was stopped by a limit (``stopped_by``); ``changed``: the
    workspace changed; ``tests_run``: the call ran the tests to completion, ``tests_passed``
    whether they all passed."""

    call_id: str
    text: str
    status: ToolStatus
    changed: bool = False
    stopped_by: str | None = None
    tests_run: bool = False
    tests_passed: bool | None = None


@dataclass(frozen=True, slots=True)
class AgentStep:
    """One assistant turn: its text, its calls and their results (same order)."""

    index: int
    content: str
    calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()


@dataclass(frozen=True, slots=True)
class FileChange:
    """A workspace file that differs from the task's repository at the end of the episode."""

    path: str
    kind: FileChangeKind


@dataclass(frozen=True, slots=True)
class Verdict:
    """The verifier's judgement. ``tests_modified``: the workspace's copies of the task's tests
    differed from the originals (the verifier judged with the pristine ones)."""

    passed: bool
    feedback: str
    tests_modified: bool = False


@dataclass(frozen=True, slots=True)
class AgentEpisode:
    """One played episode (see the module docstring)."""

    task: TaskSpec
    steps: tuple[AgentStep, ...]
    final_text: str
    ended: EndReason
    changes: tuple[FileChange, ...]
    verdict: Verdict
    messages: list[Message] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def calls(self) -> list[tuple[ToolCall, ToolResult]]:
        """Every call of the episode with its result, in order."""
        return [pair for s in self.steps for pair in zip(s.calls, s.results, strict=True)]
