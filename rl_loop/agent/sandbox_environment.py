"""The task library's agent sandbox as the RL loop's environment (``rl_loop.agent.environment``).

:class:`SandboxEnvironment` opens an agent task (:mod:`tasks.agent.tasks`, by task id) in a fresh
:class:`~tasks.agent.sandbox.Workspace` with one client flavour's tools; its workspace runs
tool calls there with every sandbox limit, judges with
:func:`~tasks.agent.verifier.verify_episode` (the task's pristine tests) and reports the files
added, modified or deleted against the task's repository. The adapter lives here because the
types it returns are the RL loop's (``rl_loop.agent.episode``) and ``tasks`` imports nothing of
ours; the loop itself (runner, gate) still takes any environment passed in.
"""

from __future__ import annotations

from rl_loop.agent.episode import FileChange, TaskSpec, ToolCall, ToolResult, Verdict
from tasks.agent.sandbox import SandboxConfig, SandboxRunner, Workspace
from tasks.agent.tasks import AgentTask, agent_task_from_id
from tasks.agent.tools import AGENT_LOOP_SYSTEM_PROMPT, FLAVOUR_TOOLS, Flavour, chat_tools
from tasks.agent.verifier import verify_episode


def task_spec(task: AgentTask, flavour: Flavour) -> TaskSpec:
    """What the policy and the audits see of ``task`` (never its solution)."""
    return TaskSpec(
        task_id=task.task_id,
        kind=task.kind,
        prompt=task.prompt,
        system_prompt=AGENT_LOOP_SYSTEM_PROMPT,
        tools=tuple(chat_tools(flavour)),
        test_files=tuple(sorted(task.test_files)),
        needs_change=task.check == "tests",
    )


class SandboxTaskWorkspace:
    """One task in one sandbox workspace (``rl_loop.agent.environment.TaskWorkspace``)."""

    def __init__(self, task: AgentTask, runner: SandboxRunner, flavour: Flavour) -> None:
        self.agent_task = task
        self._spec = task_spec(task, flavour)
        self.workspace = Workspace(task.files, runner, FLAVOUR_TOOLS[flavour])

    @property
    def task(self) -> TaskSpec:
        return self._spec

    def execute(self, call: ToolCall) -> ToolResult:
        outcome = self.workspace.execute(call.name, call.arguments)
        report = outcome.tests
        return ToolResult(
            call.id,
            outcome.text,
            outcome.status,
            changed=outcome.changed,
            stopped_by=outcome.stopped_by,
            tests_run=report is not None and report.exit_code is not None,
            tests_passed=report.all_passed if report is not None else None,
        )

    def verify(self, final_text: str) -> Verdict:
        verdict = verify_episode(self.agent_task, self.workspace, final_text)
        return Verdict(verdict.passed, verdict.feedback, verdict.tests_modified)

    def changes(self) -> list[FileChange]:
        before, after = self.agent_task.files, self.workspace.snapshot()
        changes = [FileChange(p, "deleted") for p in sorted(set(before) - set(after))]
        changes += [FileChange(p, "added") for p in sorted(set(after) - set(before))]
        changes += [
            FileChange(p, "modified") for p in sorted(set(before) & set(after))
            if before[p] != after[p]
        ]  # fmt: skip
        return sorted(changes, key=lambda c: c.path)

    def close(self) -> None:
        self.workspace.close()


class SandboxEnvironment:
    """Agent tasks by id in the sandbox (``rl_loop.agent.environment.AgentEnvironment``).

    ``flavour`` picks the tool set (``chat``: edit; ``responses``: apply_patch)."""

    def __init__(
        self,
        runner: SandboxRunner | None = None,
        flavour: Flavour = "chat",
        config: SandboxConfig | None = None,
    ) -> None:
        self.runner = runner or SandboxRunner.create(config)
        self.flavour: Flavour = flavour

    def open(self, task_id: str) -> SandboxTaskWorkspace:
        return SandboxTaskWorkspace(agent_task_from_id(task_id), self.runner, self.flavour)
