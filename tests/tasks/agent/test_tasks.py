"""Agent tasks: deterministic repositories, reference solutions that pass, mistakes that fail."""

from __future__ import annotations

import builtins
import json
import keyword
import re
from pathlib import Path

import pytest

from tasks.agent.repos import (
    HELDOUT_NAMES,
    NUMERIC,
    TEXT,
    TRAIN_NAMES,
    TRAIN_WORDS,
    Repo,
    generate_repo,
)
from tasks.agent.sandbox import SandboxRunner, Workspace
from tasks.agent.tasks import (
    AGENT_KINDS,
    AgentKind,
    FileEdit,
    agent_task_from_id,
    make_agent_task,
    sample_agent_tasks,
)
from tasks.agent.tools import FLAVOUR_TOOLS
from tasks.agent.verifier import verify_answer, verify_episode
from tasks.ide.task import HELDOUT_SEED_START, Split, TaskIdError

TRAIN_SEEDS = range(200)
HELDOUT_SEEDS = range(HELDOUT_SEED_START, HELDOUT_SEED_START + 50)
SPLIT_SEED: dict[Split, int] = {"train": 5, "heldout": HELDOUT_SEED_START + 5}


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


@pytest.mark.parametrize("split", ["train", "heldout"])
@pytest.mark.parametrize("kind", [k for k in AGENT_KINDS if k != "find_definition"])
def test_the_reference_solves_the_task_and_the_mistake_does_not(
    kind: AgentKind, split: Split, runner: SandboxRunner
) -> None:
    task = make_agent_task(kind, SPLIT_SEED[split])
    assert task.split == split
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


def _shown_words(repo: Repo) -> set[str]:
    """Every word a repository shows: in its paths and in its files' text."""
    return {w for path, text in repo.files.items() for w in re.findall(r"\w+", f"{path}\n{text}")}


def _own_names(repo: Repo) -> set[str]:
    """The names a task on the repository can ask about or answer with."""
    modules = (repo.numeric_module, repo.text_module, repo.report_module)
    return (
        {h.name for h in repo.helpers}
        | {repo.describe, repo.tabulate, repo.package}
        | {m.rsplit("/", 1)[-1].removesuffix(".py") for m in modules}
    )


def test_heldout_repositories_use_names_no_train_repository_shows() -> None:
    train_words = set().union(*(_shown_words(generate_repo(s)) for s in TRAIN_SEEDS))
    heldout = [generate_repo(s) for s in HELDOUT_SEEDS]
    heldout_names = set().union(*(_own_names(r) for r in heldout))
    assert all(r.split == "heldout" for r in heldout)
    assert heldout_names and not heldout_names & train_words
    symbols = {make_agent_task("find_definition", s).symbol for s in HELDOUT_SEEDS}
    assert not symbols & train_words


def test_train_repositories_name_most_things_with_fresh_compounds_no_heldout_name_touches() -> None:
    train = [generate_repo(s) for s in TRAIN_SEEDS]
    helper_names = [h.name for r in train for h in r.helpers]
    generated = [n for n in helper_names if all(w in TRAIN_WORDS for w in n.split("_"))]
    # Most helpers have a compound name, and few compounds repeat: recall cannot answer.
    assert len(generated) > 0.6 * len(helper_names)
    assert len(set(generated)) > 0.9 * len(generated)
    train_names = set().union(*(_own_names(r) for r in train))
    heldout_names = set().union(*(_own_names(generate_repo(s)) for s in HELDOUT_SEEDS))
    assert not any(a in b or b in a for a in train_names for b in heldout_names)
    assert not any(w in b for w in TRAIN_WORDS for b in heldout_names)
    for name in train_names:
        assert name.isidentifier() and not keyword.iskeyword(name)
        assert not hasattr(builtins, name)


def test_every_name_pool_is_disjoint_from_the_other_split_and_safe_to_define() -> None:
    def functions(split: Split) -> list[tuple[str, ...]]:
        """One pool per function slot: each helper's, describe's and tabulate's."""
        names = TRAIN_NAMES if split == "train" else HELDOUT_NAMES
        return [h.names_in(split) for h in (*NUMERIC, *TEXT)] + [names.describe, names.tabulate]

    def paths(split: Split) -> list[tuple[str, ...]]:
        names = TRAIN_NAMES if split == "train" else HELDOUT_NAMES
        return [names.packages, names.numeric_modules, names.text_modules, names.report_modules]

    def every(split: Split) -> set[str]:
        return {n for pool in (*functions(split), *paths(split)) for n in pool}

    # No held-out name is, or contains, a train name (nor the reverse): recall cannot answer.
    assert not any(a in b or b in a for a in every("train") for b in every("heldout"))
    for split in ("train", "heldout"):
        slots = functions(split)
        assert all(len(pool) >= 3 for pool in slots)  # rename has a free alternative
        modules = [n for pool in paths(split)[1:] for n in pool]
        assert len(set(modules)) == len(modules)  # one test file per module
        for i, pool in enumerate(slots):
            for name in pool:
                assert name.isidentifier() and not keyword.iskeyword(name)
                assert not hasattr(builtins, name)
                # A function name inside another slot's would make the tasks' snippets (a call
                # `name(`, an import ending in ` name`) ambiguous.
                others = {n for j, p in enumerate(slots) if j != i for n in p}
                assert not any(name in other for other in others), name


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_kind_builds_on_both_splits_and_renames_within_the_split(split: Split) -> None:
    seeds = list(TRAIN_SEEDS if split == "train" else HELDOUT_SEEDS)[:40]
    for seed in seeds:
        for kind in AGENT_KINDS:
            task = make_agent_task(kind, seed)
            assert task.split == split
            task.solved_files()  # every reference edit applies
        rename = make_agent_task("rename_symbol", seed)
        repo = generate_repo(seed)
        helper = repo.helper(rename.symbol).helper
        assert rename.new_name in helper.names_in(split)
        assert rename.new_name != rename.symbol


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_generated_repositories_pass_their_own_tests(
    split: Split, runner: SandboxRunner, tmp_path: Path
) -> None:
    seeds = TRAIN_SEEDS if split == "train" else HELDOUT_SEEDS
    for seed in list(seeds)[:4]:
        repo_dir, scratch = tmp_path / f"repo-{seed}", tmp_path / f"scratch-{seed}"
        scratch.mkdir()
        for path, text in generate_repo(seed).files.items():
            (repo_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (repo_dir / path).write_text(text, encoding="utf-8")
        report = runner.run_pytest(repo_dir, scratch)
        assert report.all_passed, report.output
