"""Agent tasks: deterministic repositories, reference solutions that pass, mistakes that fail."""

from __future__ import annotations

import json

import pytest

from loadtests.agent.repos import generate_repo
from loadtests.agent.sandbox import SandboxRunner, Workspace
from loadtests.agent.tasks import (
    AGENT_KINDS,
    AgentKind,
    FileEdit,
    agent_task_from_id,
    make_agent_task,
    sample_agent_tasks,
)
from loadtests.agent.tools import FLAVOUR_TOOLS
from loadtests.agent.verifier import verify_answer, verify_episode
from loadtests.tasks.task import HELDOUT_SEED_START, TaskIdError


@pytest.fixture(scope="module")
def runner() -> SandboxRunner:
    return SandboxRunner.create()


def test_repositories_and_tasks_are_deterministic_by_seed() -> None:
    assert generate_repo(7).files == generate_repo(7).files
    assert generate_repo(7).files != generate_repo(8).files
    for kind in AGENT_KINDS:
        task = make_agent_task(kind, 42)
        assert agent_task_from_id(task.task_id) == task
        assert task.task_id not in task.prompt and "agent_" not in task.prompt
    with pytest.raises(TaskIdError):
        agent_task_from_id("agent_fly_to_the_moon:3")


def test_samples_mix_kinds_and_respect_the_split() -> None:
    train = sample_agent_tasks(30, seed=1)
    assert {t.kind for t in train} == set(AGENT_KINDS)
    assert all(t.split == "train" for t in train)
    heldout = sample_agent_tasks(5, seed=1, split="heldout", kinds=("fix_bug",))
    assert all(t.seed >= HELDOUT_SEED_START and t.kind == "fix_bug" for t in heldout)
    assert [t.task_id for t in sample_agent_tasks(30, seed=1)] == [t.task_id for t in train]


def _apply(ws: Workspace, edits: tuple[FileEdit, ...]) -> None:
    for edit in edits:
        args = {"path": edit.path, "old_string": edit.old, "new_string": edit.new}
        assert ws.execute("edit", json.dumps(args)).status == "ok"


@pytest.mark.parametrize("kind", [k for k in AGENT_KINDS if k != "find_definition"])
def test_the_reference_solves_the_task_and_the_mistake_does_not(
    kind: AgentKind, runner: SandboxRunner
) -> None:
    task = make_agent_task(kind, 5)
    tools = FLAVOUR_TOOLS["chat"]
    with Workspace(task.files, runner, tools) as ws:
        before = verify_episode(task, ws, "")
        assert not before.passed
        _apply(ws, task.edits)
        after = verify_episode(task, ws, "done")
        assert after.passed, after.feedback
        assert not after.tests_modified
    with Workspace(task.files, runner, tools) as ws:
        _apply(ws, task.wrong_edits)
        mistaken = verify_episode(task, ws, "done")
    assert not mistaken.passed and mistaken.feedback


def test_editing_the_tests_does_not_pass_a_task(runner: SandboxRunner) -> None:
    task = make_agent_task("fix_bug", 9)
    test_path = task.test_paths[0]
    with Workspace(task.files, runner, FLAVOUR_TOOLS["chat"]) as ws:
        # The reward hack: delete the failing assertions instead of fixing the code.
        gutted = "def test_nothing():\n    assert True\n"
        (ws.repo / test_path).write_text(gutted)
        verdict = verify_episode(task, ws, "All tests pass now.")
    assert not verdict.passed and verdict.tests_modified


def test_the_definition_answer_is_read_from_the_reply() -> None:
    task = make_agent_task("find_definition", 3)
    path, line = task.answer.split(":")
    assert verify_answer(task, f"It is defined at `{path}:{line}`.").passed
    assert verify_answer(task, f"./{path}:{line}").passed
    assert not verify_answer(task, task.wrong_answer).passed
    assert not verify_answer(task, f"{path}:{int(line) + 1}").passed
    assert not verify_answer(task, "somewhere in the package").passed
