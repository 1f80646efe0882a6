"""The verdict on an agent episode: did the repository (or the answer) end up right?

- ``answer`` tasks (``find_definition``): the final reply must name the definition as
  ``path:line`` (the first such token counts; ``./`` and backticks tolerated).
- ``tests`` tasks: the task's own test files, as the task gave them, run against the package as
  the agent left it, in a fresh copy inside the sandbox (so editing or deleting a test changes
  nothing but the ``tests_modified`` flag, which the verdict reports for the audits; a
  ``conftest.py`` the agent added is left out too); every test must pass. A rename also needs
  the old name gone from every module of the package and the new one defined where the old one
  was.

The feedback says what is wrong without giving the answer away (the hint for self-distillation).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

from tasks.agent.sandbox import TestReport, Workspace
from tasks.agent.tasks import AgentTask, identifiers

_LOCATION = re.compile(r"`?(?:\./)?([\w./-]+\.py):(\d+)`?")
_FAILED_LINE = re.compile(r"^(FAILED|ERROR) .*$", re.M)


@dataclass(frozen=True, slots=True)
class AgentVerdict:
    """Whether the episode solved its task, the feedback, and what the audits look at."""

    passed: bool
    feedback: str
    tests_modified: bool = False
    tests: TestReport | None = None


def verify_answer(task: AgentTask, reply: str) -> AgentVerdict:
    """Judge a ``find_definition`` reply."""
    match = _LOCATION.search(reply or "")
    if match is None:
        return AgentVerdict(False, "the answer names no path:line")
    given = f"{match.group(1)}:{int(match.group(2))}"
    if given == task.answer:
        return AgentVerdict(True, "correct")
    path = task.answer.split(":", 1)[0]
    if match.group(1) != path:
        return AgentVerdict(False, f"`{task.symbol}` is not defined in {match.group(1)}")
    return AgentVerdict(False, f"line {match.group(2)} of {path} is not the definition")


def _is_conftest(path: str) -> bool:
    return path.rsplit("/", 1)[-1] == "conftest.py"


def verify_episode(task: AgentTask, workspace: Workspace, final_reply: str) -> AgentVerdict:
    """The verdict on ``task`` given the workspace's state and the agent's last reply."""
    if task.check == "answer":
        return verify_answer(task, final_reply)
    files = workspace.snapshot()
    originals = task.test_files
    modified = any(files.get(path) != text for path, text in originals.items())
    check_dir = workspace.root / "verify"
    if check_dir.exists():
        shutil.rmtree(check_dir)
    for path, text in {**files, **originals}.items():
        # Only the task's own tests judge: a test file or a conftest.py (pytest loads its hooks,
        # which can turn every failure into a pass) the agent added is left out.
        if path not in originals and (path.startswith("tests/") or _is_conftest(path)):
            continue
        target = check_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    report = workspace.runner.run_pytest(check_dir, workspace.scratch, sorted(originals))
    shutil.rmtree(check_dir, ignore_errors=True)
    if report.stopped_by:
        return AgentVerdict(False, f"the tests were stopped by {report.stopped_by}", modified,
                            report)  # fmt: skip
    if not report.all_passed:
        lines = [m.group(0) for m in _FAILED_LINE.finditer(report.output)][:3]
        detail = "\n".join(lines) if lines else report.output[-400:]
        return AgentVerdict(False, f"tests fail:\n{detail}", modified, report)
    if task.kind == "rename_symbol":
        still = sorted(
            path
            for path, text in files.items()
            if path.endswith(".py") and not path.startswith("tests/")
            and task.symbol in identifiers(text)
        )  # fmt: skip
        if still:
            return AgentVerdict(False, f"`{task.symbol}` is still used in {', '.join(still)}",
                                modified, report)  # fmt: skip
        if task.new_name not in identifiers(files.get(task.module, "")):
            return AgentVerdict(False, f"`{task.new_name}` is not defined in {task.module}",
                                modified, report)  # fmt: skip
    return AgentVerdict(True, f"all {report.passed} tests pass", modified, report)
