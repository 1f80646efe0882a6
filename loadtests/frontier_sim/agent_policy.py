"""The scripted agent: how the simulator plays a competent coding agent on an agent task.

For a request whose user message is a registered agent task (``oracle.known_agent_task``) and
that offers tools, the simulator answers one step of the episode, reading the conversation as a
real agent would:

1. the plan: the tool calls a competent agent makes for the task's kind, from the task's
   reference solution (``tasks/agent/tasks.py``) and the tools offered (an ``edit`` call, or a
   unified diff for ``apply_patch`` when that is the edit tool offered)::

       find_definition  search "def f("                 -> answer path:line read from the result
       add_import       run_tests, search "def f(", edit, run_tests -> summary
       fix_bug          run_tests <test>, read_file <module>, edit, run_tests <test> -> summary
       rename_symbol    search f, edit x3 (definition, import, call), run_tests -> summary
       implement        run_tests <test>, read_file <test>, read_file <module>, edit,
                        run_tests <test> -> summary

2. where it is: the plan's calls found, in order, among the calls the conversation already made
   (a call that does not match the plan, such as a broken one, is skipped over), so the next
   step follows from the conversation alone and a repeated request gets the same answer;
3. the mistake: with probability ``1 - agent_success_rate`` (drawn once per task from the
   simulator's seed and the task id) the plan carries one realistic mistake: the import taken
   from the wrong module, another token changed than the broken one, the call site left out of a
   rename, an implementation with a bug, the import line answered instead of the definition;
4. a broken call: with probability ``agent_invalid_call_rate`` per step a call leaves out a
   required argument; the next request (whose conversation holds the tool's error) repeats it
   correctly;
5. the final answer reads the last test run in the conversation: "the tests pass", or that they
   still fail.
"""

from __future__ import annotations

import difflib
import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loadtests.frontier_sim.config import SimulatorConfig
from loadtests.frontier_sim.transcript import PlannedCall, ToolStep
from tasks.agent.tasks import AgentTask, FileEdit, apply_edit

EDIT_TOOLS = ("edit", "apply_patch")


@dataclass(frozen=True, slots=True)
class Decision:
    """The agent's next move: a tool call, or its final text."""

    call: PlannedCall | None = None
    text: str = ""


def _draw(config: SimulatorConfig, *parts: object) -> float:
    key = "|".join(str(p) for p in (config.seed, *parts)).encode()
    return random.Random(hashlib.blake2b(key, digest_size=16).digest()).random()


def _edit_call(tool: str, files: dict[str, str], edit: FileEdit) -> PlannedCall:
    """``edit`` as a call of ``tool``; ``files`` is the repository before it (then updated)."""
    before = files[edit.path]
    after = apply_edit(before, edit.old, edit.new)
    files[edit.path] = after
    if tool == "edit":
        args = {"path": edit.path, "old_string": edit.old, "new_string": edit.new}
        return PlannedCall("edit", args)
    diff = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{edit.path}",
        tofile=f"b/{edit.path}",
    )
    return PlannedCall("apply_patch", {"patch": "".join(diff)})


def plan(task: AgentTask, tools: Sequence[str], flawed: bool) -> list[PlannedCall]:
    """The tool calls of a competent agent (with the kind's mistake when ``flawed``)."""
    edit_tool = next((t for t in EDIT_TOOLS if t in tools), None)
    test = {"paths": list(task.test_paths)}
    files = dict(task.files)
    edits = task.wrong_edits if flawed else task.edits
    changes = [_edit_call(edit_tool, files, e) for e in edits] if edit_tool else []
    if task.kind == "find_definition":
        query = task.symbol if flawed else f"def {task.symbol}("
        return [PlannedCall("search", {"query": query})]
    if task.kind == "add_import":
        search = PlannedCall("search", {"query": f"def {task.symbol}("})
        return [PlannedCall("run_tests", {}), search, *changes, PlannedCall("run_tests", {})]
    if task.kind == "fix_bug":
        read = PlannedCall("read_file", {"path": task.module})
        return [PlannedCall("run_tests", test), read, *changes, PlannedCall("run_tests", test)]
    if task.kind == "rename_symbol":
        search = PlannedCall("search", {"query": task.symbol})
        return [search, *changes, PlannedCall("run_tests", {})]
    reads = [PlannedCall("read_file", {"path": p}) for p in (*task.test_paths, task.module)]
    return [PlannedCall("run_tests", test), *reads, *changes, PlannedCall("run_tests", test)]


def _definition_answer(task: AgentTask, steps: Sequence[ToolStep], flawed: bool) -> str:
    """``path:line`` read from the last search result (the import or call line if flawed)."""
    result = next((s.result for s in reversed(steps) if s.name == "search" and s.result), "")
    for line in result.splitlines():
        location, _, text = line.partition(": ")
        is_definition = text.startswith(f"def {task.symbol}(")
        if location.count(":") == 1 and is_definition != flawed:
            return f"`{task.symbol}` is defined at {location}."
    return f"I could not find where `{task.symbol}` is defined."


def _summary(task: AgentTask, steps: Sequence[ToolStep]) -> str:
    report = next((s.result for s in reversed(steps) if s.name == "run_tests" and s.result), "")
    tail = report.strip().splitlines()[-1] if report.strip() else ""
    if " passed" in tail and "failed" not in tail and "error" not in tail:
        return f"Done: I changed {task.module} and the tests pass ({tail.strip('= ')})."
    return f"I changed {task.module}, but the tests still fail: {tail.strip('= ') or 'no report'}."


def _broken(call: PlannedCall, schema: dict[str, Any] | None) -> PlannedCall:
    required = (schema or {}).get("required") or []
    if not required:
        return PlannedCall(call.name, {**call.arguments, "unexpected": True})
    return PlannedCall(call.name, {k: v for k, v in call.arguments.items() if k != required[-1]})


def decide(
    task: AgentTask,
    steps: Sequence[ToolStep],
    tools: dict[str, dict[str, Any]],
    config: SimulatorConfig,
) -> Decision:
    """The next move of the scripted agent (see the module docstring)."""
    flawed = _draw(config, "agent", task.task_id) >= config.agent_success_rate
    calls = plan(task, tuple(tools), flawed)
    position = 0
    for step in steps:
        if position < len(calls) and calls[position].matches(step):
            position += 1
    if position < len(calls):
        call = calls[position]
        if _draw(config, "invalid", task.task_id, len(steps)) < config.agent_invalid_call_rate:
            call = _broken(call, tools.get(call.name))
        return Decision(call=call)
    if task.kind == "find_definition":
        return Decision(text=_definition_answer(task, steps, flawed))
    return Decision(text=_summary(task, steps))
