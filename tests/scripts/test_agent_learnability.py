"""`scripts/agent_learnability.py`'s glue: the simulator's scripted agent plays train-split tasks
in process and passes them, its episodes become distillation rows, the step budget is what
sets the steps, and a whole measurement (base, one optimizer step) ends with one
JSON line of figures. Training here is one step on the tiny model: seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.frontier_sim.config import SimulatorConfig
from rl_loop.agent.distill import episode_sft_row, row_examples
from rl_loop.agent.runner import play_episode
from rl_loop.agent.sandbox_environment import SandboxEnvironment
from rl_loop.modeling import load_policy
from rl_loop.trainers.sft import sft_steps
from scripts.agent_learnability import (
    COPY_REPLAY_POOL,
    LearnabilitySettings,
    ScriptedAgentPolicy,
    base_checkpoint,
    competent_rows,
    heldout_overlap,
    main,
    parse_settings,
    train_tasks,
)
from serving.base_checkpoints import base_training_config
from serving.copy_curriculum import COPY_RECIPE, CopySpec
from tasks.agent.tasks import AgentKind, agent_task_from_id, heldout_task_ids, make_agent_task
from tests.fixtures.vllm_fixture import cache_dir

COMPETENT = SimulatorConfig(agent_success_rate=1.0)


@pytest.fixture(scope="module")
def environment() -> SandboxEnvironment:
    return SandboxEnvironment()


@pytest.mark.parametrize("kind", ["find_definition", "add_import", "fix_bug"])
def test_the_scripted_agent_solves_a_task_in_process_and_its_episode_is_a_distillation_row(
    kind: AgentKind, environment: SandboxEnvironment
) -> None:
    task = make_agent_task(kind, 11)
    episode = play_episode(
        ScriptedAgentPolicy(task, COMPETENT), environment, task.task_id, max_steps=8
    )
    assert episode.passed and episode.ended == "answered"
    row = episode_sft_row(episode)
    assert row is not None
    assert len(row_examples(row)) == len(episode.steps)


def test_trajectories_come_from_the_train_split_of_the_kind_only(
    environment: SandboxEnvironment,
) -> None:
    settings = LearnabilitySettings(kind="find_definition", trajectories=4)
    rows, played = competent_rows(settings, environment)
    assert played == 4 and len(rows) == 4
    prompts = {row["messages"][1]["content"] for row in rows}
    assert all(p.startswith("Where is the function") for p in prompts)


def test_the_step_budget_sets_the_steps_whatever_the_number_of_examples() -> None:
    config = LearnabilitySettings().sft_config(600)
    assert sft_steps(config, 10) == 600


def test_options_left_out_keep_the_settings_defaults() -> None:
    settings = parse_settings(["--kind", "fix_bug", "--budgets", "0", "50"])
    assert settings.kind == "fix_bug" and settings.budgets == (0, 50)
    assert settings.preset == LearnabilitySettings().preset
    with pytest.raises(SystemExit):
        parse_settings(["--kind", "nonsense"])


def test_the_base_is_the_flywheels_with_its_copy_curriculum_unless_told_otherwise() -> None:
    assert parse_settings([]).pretrain_copy == COPY_RECIPE
    assert parse_settings(["--no-copy-curriculum"]).pretrain_copy == CopySpec()
    config = base_training_config(1200, 128, COPY_RECIPE)
    assert config.copy_curriculum == COPY_RECIPE and config.eval_every == 100


def test_a_checkpoint_given_as_a_path_is_the_base_as_is(tmp_path: Path) -> None:
    settings = parse_settings(["--base", str(tmp_path), "--pretrain-steps", "1200"])
    assert settings.base == tmp_path
    assert base_checkpoint(settings) == tmp_path  # no init built, no pre-training run


def test_a_measurement_ends_with_one_json_line_of_figures_per_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--budgets", "0", "1", "--trajectories", "2", "--heldout", "1", "--batch-size", "2"]
    argv += ["--max-steps", "2", "--max-new-tokens", "8", "--cache", str(cache_dir())]
    assert main(argv) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [b["steps"] for b in last["budgets"]] == [0, 1]
    assert last["trajectories"] == {"played": 2, "passed": 2, "examples": 4}
    assert last["sequence_lengths"]["over_context"] == 0
    assert set(last["heldout_overlap"]) >= {"heldout_symbol_seen", "heldout_pair_seen"}
    for figures in last["budgets"]:
        assert figures["episodes"] == 1
        assert 0.0 <= figures["validity"] <= 1.0
        assert len(figures["passed_tasks"]) == figures["solved"]


def test_the_overlap_counts_heldout_symbols_and_answers_that_training_showed() -> None:
    train = [make_agent_task("find_definition", seed) for seed in range(40)]
    heldout = [*train[:2], make_agent_task("find_definition", 40)]
    overlap = heldout_overlap(train, heldout)
    assert overlap["heldout_pair_seen"] >= 2
    assert overlap["heldout_symbol_seen"] >= overlap["heldout_pair_seen"]
    assert overlap["train_symbols"] == len({t.symbol for t in train})
    assert heldout_overlap([], heldout)["heldout_symbol_seen"] == 0


def test_the_measured_heldout_tasks_ask_about_symbols_and_answers_training_never_showed() -> None:
    settings = LearnabilitySettings(kind="find_definition", trajectories=200, heldout=12)
    ids = heldout_task_ids(settings.heldout, settings.seed, [settings.kind])
    overlap = heldout_overlap(train_tasks(settings), [agent_task_from_id(i) for i in ids])
    assert overlap["train_symbols"] > 0 and overlap["train_answers"] > 0
    assert overlap["heldout_symbol_seen"] == 0
    assert overlap["heldout_answer_seen"] == 0 and overlap["heldout_pair_seen"] == 0


def test_copy_replay_trains_copy_windows_beside_the_trajectories(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--budgets", "2", "--trajectories", "2", "--heldout", "1", "--batch-size", "2"]
    argv += ["--max-steps", "2", "--max-new-tokens", "8", "--cache", str(cache_dir())]
    assert main([*argv, "--copy-replay", "2", "--copy-replay-len", "64"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["budgets"][0]
    assert figures["copy_loss_first"] > 0 and figures["copy_loss_last"] > 0
    settings = parse_settings(["--copy-replay", "2", "--copy-replay-len", "64"])
    policy = load_policy(base_checkpoint(settings.model_copy(update={"cache": cache_dir()})))
    windows = settings.copy_replay_windows(policy)
    assert windows is not None and windows.shape == (COPY_REPLAY_POOL, 64)
    specials = set(policy.tokenizer.all_special_ids)
    assert not specials & set(windows.flatten().tolist())
    assert parse_settings([]).copy_replay_windows(policy) is None
