"""Which agent tasks the local model learns from a competent agent's trajectories, and with how
many optimizer steps (issue 18: agent tasks "within the small model's reach after training").

    trajectories  the frontier simulator's scripted agent (``loadtests.frontier_sim.agent_policy.
                  decide``, always competent, never a broken call) plays ``trajectories`` tasks of
                  one kind, drawn from the train split only, in the sandbox
                  (``SandboxEnvironment``); each passed episode is an ``episode_sft`` row
                  (``rl_loop.agent.distill.episode_sft_row``)
    base          the preset's random init (``serving.build.ensure_model``), base-trained on
                  stdlib code first when ``pretrain_steps`` > 0 (``serving.train_base``, cached,
                  the flywheel's settings); or any checkpoint given as a local path (``base``)
    distill       for each step budget, a fresh copy of the base is distilled on those rows
                  (``rl_loop.agent.distill.train_distill``: every assistant turn, loss on the
                  turn alone); ``max_epochs`` is lifted so the budget, not the data size, sets
                  the steps
    evaluate      ``heldout`` tasks of the same kind from the held-out split (never trained on),
                  played greedily by the distilled model (``CheckpointPolicy``) and folded by the
                  agent gate's ``evaluate_episodes`` (what ``evaluate_policy`` does, one episode
                  at a time for the progress bar): episode success, tool-call validity, steps per
                  success
    report        one line per budget, the sequence lengths the model trains and plays on
                  (tokens per example: the tools' JSON in the system turn is most of a prompt),
                  how many held-out symbols and answers training already showed
                  (``heldout_overlap``), and, last, one JSON line with every figure

Budget 0 evaluates the base itself. Run:
``nice -n 19 .venv/bin/python scripts/agent_learnability.py --kind find_definition --budgets 0 100``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import torch
from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from loadtests.frontier_sim.agent_policy import decide
from loadtests.frontier_sim.config import SimulatorConfig
from loadtests.frontier_sim.transcript import StepCollector, ToolStep
from rl_loop.agent.checkpoint_policy import CheckpointPolicy
from rl_loop.agent.distill import distillation_examples, episode_sft_row, train_distill
from rl_loop.agent.episode import AgentEpisode, ToolCall
from rl_loop.agent.gate import AgentEval, evaluate_episodes
from rl_loop.agent.runner import AssistantMessage, play_episode
from rl_loop.agent.sandbox_environment import SandboxEnvironment
from rl_loop.config import SftConfig
from rl_loop.datasets import SftExample
from rl_loop.modeling import Policy, load_policy
from serving.base_checkpoints import base_training_config, ensure_trained
from serving.build import ensure_model
from serving.copy_curriculum import COPY_RECIPE, CopySpec, copy_windows, ordinary_ids
from serving.model_config import PresetName
from tasks.agent.tasks import (
    AgentKind,
    AgentTask,
    heldout_task_ids,
    make_agent_task,
    parse_agent_task_id,
    sample_agent_tasks,
)

REPO = Path(__file__).resolve().parents[1]
COPY_REPLAY_POOL = 4096  # copy windows drawn once; each step takes copy_replay of them


class LearnabilitySettings(BaseModel):
    """One measurement; each default is defined here once (the CLI overrides some)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: AgentKind = Field(default="find_definition", description="The agent task kind.")
    preset: PresetName = Field(default="tiny", description="The model preset (serving).")
    pretrain_steps: int = Field(
        default=0, ge=0, description="Base training on stdlib code first (cached); 0: the init."
    )
    pretrain_seq_len: int = Field(default=128, ge=16, description="Base training window.")
    pretrain_copy: CopySpec = Field(
        default=COPY_RECIPE, description="The base's copy curriculum (the flywheel's)."
    )
    base: Path | None = Field(
        default=None,
        description="A checkpoint directory to distil into instead of the preset's (pre-trained) "
        "init; preset and pretrain_steps are then not read.",
    )
    budgets: tuple[int, ...] = Field(
        default=(100, 300, 600), min_length=1, description="Distillation steps, one run each."
    )
    trajectories: int = Field(
        default=200, ge=1, description="Train-split tasks the scripted agent plays."
    )
    heldout: int = Field(default=12, ge=1, description="Held-out tasks each model plays.")
    seed: int = Field(default=0, description="Draws the train and held-out tasks; training seed.")
    max_steps: int = Field(default=6, ge=1, description="Assistant turns per played episode.")
    max_new_tokens: int = Field(default=128, ge=1, description="Tokens per assistant turn.")
    batch_size: int = Field(default=16, ge=1, description="Examples per optimizer step.")
    lr: float = Field(default=SftConfig().lr, gt=0, description="Peak learning rate.")
    copy_replay: int = Field(
        default=0,
        ge=0,
        description="Copy windows (serving.copy_curriculum) per distillation step, trained with "
        "the plain LM loss beside the trajectories, so that the base's copy is kept while the "
        "task is learnt; 0: none.",
    )
    copy_replay_len: int = Field(default=256, ge=32, description="Tokens per copy window.")
    cache: Path = Field(default=REPO / ".cache", description="Where checkpoints are kept.")
    device: str = Field(
        default="cpu", description="torch device of distillation and play (cuda on a GPU host)."
    )

    def sft_config(self, steps: int) -> SftConfig:
        # max_epochs lifted: the measurement is of steps, whatever the number of trajectories.
        return SftConfig(
            steps=steps,
            max_epochs=1e9,
            batch_size=self.batch_size,
            lr=self.lr,
            replay_windows=self.copy_replay,
        )

    def copy_replay_windows(self, policy: Policy) -> torch.Tensor | None:
        """The copy windows the distillation draws its replay from (None: no replay)."""
        if not self.copy_replay:
            return None
        tokenizer = policy.tokenizer
        ids = ordinary_ids(len(tokenizer), tokenizer.all_special_ids)
        generator = torch.Generator().manual_seed(self.seed)
        count = max(COPY_REPLAY_POOL, self.copy_replay)
        return copy_windows(count, self.copy_replay_len, ids, COPY_RECIPE, generator)


class ScriptedAgentPolicy:
    """The simulator's scripted agent on one task, in process (an ``AgentPolicy``): it reads the
    conversation's tool calls and results as the simulator's chat wire does and answers with
    ``decide``'s next move (arguments as the simulator writes them: compact JSON)."""

    def __init__(self, task: AgentTask, config: SimulatorConfig) -> None:
        self.task = task
        self.config = config

    def act(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> AssistantMessage:
        schemas = {t["function"]["name"]: dict(t["function"]["parameters"]) for t in tools}
        move = decide(self.task, conversation_steps(messages), schemas, self.config)
        if move.call is None:
            return AssistantMessage(move.text)
        turn = sum(m.get("role") == "assistant" for m in messages)
        arguments = json.dumps(move.call.arguments, separators=(",", ":"))
        return AssistantMessage("", (ToolCall(f"call_{turn}", move.call.name, arguments),))


def conversation_steps(messages: Sequence[Mapping[str, Any]]) -> tuple[ToolStep, ...]:
    """The tool calls of a Chat Completions conversation with their results."""
    steps = StepCollector()
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                function = call["function"]
                steps.call(call.get("id"), function.get("name"), function.get("arguments"))
        elif message.get("role") == "tool":
            steps.result(message.get("tool_call_id"), str(message.get("content") or ""))
    return steps.steps()


def train_tasks(settings: LearnabilitySettings) -> list[AgentTask]:
    """The train-split tasks of the kind the scripted agent plays."""
    tasks = sample_agent_tasks(settings.trajectories, settings.seed, "train", [settings.kind])
    assert all(t.split == "train" for t in tasks)
    return tasks


def heldout_overlap(train: Sequence[AgentTask], heldout: Sequence[AgentTask]) -> dict[str, int]:
    """How much of the held-out tasks' wording and answers training already showed: held-out
    tasks whose symbol, whose answer (``path:line``), or whose symbol with that same answer
    appears in a training task. A memorising model can solve the last kind at best."""
    symbols = {t.symbol for t in train if t.symbol}
    answers = {t.answer for t in train if t.answer}
    pairs = {(t.symbol, t.answer) for t in train if t.symbol and t.answer}
    return {
        "train_symbols": len(symbols),
        "train_answers": len(answers),
        "heldout_symbol_seen": sum(t.symbol in symbols for t in heldout),
        "heldout_answer_seen": sum(t.answer in answers for t in heldout),
        "heldout_pair_seen": sum((t.symbol, t.answer) in pairs for t in heldout),
    }


def competent_rows(
    settings: LearnabilitySettings, environment: SandboxEnvironment
) -> tuple[list[dict[str, Any]], int]:
    """``episode_sft`` rows of the scripted agent's passed episodes on train-split tasks of the
    kind, and how many episodes it played."""
    tasks = train_tasks(settings)
    config = SimulatorConfig(agent_success_rate=1.0, agent_invalid_call_rate=0.0)
    rows = []
    for task in tqdm(tasks, desc=f"trajectories {settings.kind}", unit="ep"):
        policy = ScriptedAgentPolicy(task, config)
        episode = play_episode(policy, environment, task.task_id, max_steps=settings.max_steps)
        row = episode_sft_row(episode)
        if row is not None:
            rows.append(row)
    return rows, len(tasks)


def base_checkpoint(settings: LearnabilitySettings) -> Path:
    """``base`` when given; else the preset's init, base-trained for ``pretrain_steps`` (reused
    when already done)."""
    if settings.base is not None:
        return settings.base
    init = ensure_model(settings.cache / "models", settings.preset, progress=True)
    if settings.pretrain_steps == 0:
        return init
    config = base_training_config(
        settings.pretrain_steps, settings.pretrain_seq_len, settings.pretrain_copy
    )
    return ensure_trained(init, init.parent, config, progress=True)


def sequence_lengths(policy: Policy, examples: Sequence[SftExample]) -> dict[str, Any]:
    """Tokens per training example as the chat template renders them: the prompt (system turn
    with the tools' JSON, the conversation so far) and the completion (the assistant turn)."""
    prompts, completions = [], []
    for ex in examples:
        prompt = policy.encode_prompt(ex.prompt, ex.tools)
        turn: dict[str, Any] = {"role": "assistant", "content": ex.answer}
        if ex.tool_calls:
            turn["tool_calls"] = ex.tool_calls
        text = policy.tokenizer.apply_chat_template(
            [*ex.prompt, turn], tools=[dict(t) for t in ex.tools or ()] or None, tokenize=False
        )
        assert isinstance(text, str)
        whole = policy.tokenizer(text, add_special_tokens=False)["input_ids"]
        prompts.append(len(prompt))
        completions.append(len(whole) - len(prompt))
    tools = examples[0].tools if examples else None
    bare = list(examples[0].prompt[:2]) if examples else []
    context = int(policy.model.config.max_position_embeddings)
    return {
        "prompt_tokens": _spread(prompts),
        "completion_tokens": _spread(completions),
        "first_prompt_tokens": len(policy.encode_prompt(bare, tools)),
        "first_prompt_tokens_without_tools": len(policy.encode_prompt(bare)),
        "context": context,
        "over_context": sum(p + c > context for p, c in zip(prompts, completions, strict=True)),
    }


def _spread(values: Sequence[int]) -> dict[str, float]:
    if not values:
        return {}
    return {"min": min(values), "mean": round(statistics.mean(values), 1), "max": max(values)}


def evaluate(
    settings: LearnabilitySettings,
    label: str,
    policy: Policy,
    environment: SandboxEnvironment,
    task_ids: Sequence[str],
) -> AgentEval:
    """The agent gate's figures of ``policy`` (greedy) on ``task_ids``."""
    player = CheckpointPolicy(policy, max_new_tokens=settings.max_new_tokens)
    episodes: list[AgentEpisode] = []
    for task_id in tqdm(task_ids, desc=f"held-out {label}", unit="ep"):
        episodes.append(play_episode(player, environment, task_id, max_steps=settings.max_steps))
    return evaluate_episodes(label, episodes)


def sample(episode: AgentEpisode) -> dict[str, Any]:
    """One played episode, cut short, for the report: the request and each turn's calls or
    text, and the verdict."""
    turns = [
        ("; ".join(f"{c.name}({c.arguments})" for c in step.calls) or step.content)[:160]
        for step in episode.steps[:4]
    ]
    return {
        "request": episode.task.prompt[:100],
        "turns": turns,
        "ended": episode.ended,
        "passed": episode.passed,
    }


def budget_figures(
    settings: LearnabilitySettings,
    base: Path,
    rows: Sequence[Mapping[str, Any]],
    steps: int,
    environment: SandboxEnvironment,
    task_ids: Sequence[str],
    replay: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Distil a fresh copy of ``base`` for ``steps`` (``replay``: copy windows trained beside
    the trajectories) and evaluate it."""
    policy = load_policy(base, settings.device)
    figures: dict[str, Any] = {"steps": steps}
    if steps > 0:
        with tempfile.TemporaryDirectory(prefix="agent-learnability-") as scratch:
            stats = train_distill(
                policy,
                rows,
                settings.sft_config(steps),
                output_dir=Path(scratch),
                seed=settings.seed,
                device=settings.device,
                replay=replay,
            )
        figures.update(
            train_seconds=round(stats.seconds, 1),
            seconds_per_step=round(stats.seconds / max(1, stats.steps), 3),
            loss_first=stats.first_loss,
            loss_last=stats.last_loss,
        )
        if "replay_loss_first" in stats.extra:  # the copy windows' LM loss (--copy-replay)
            figures.update(
                copy_loss_first=stats.extra["replay_loss_first"],
                copy_loss_last=stats.extra["replay_loss_last"],
            )
    trained = time.perf_counter()
    result = evaluate(settings, f"{steps} steps", policy, environment, task_ids)
    summary = result.summary()
    figures.update(
        success=result.success_rate,
        solved=result.successes,
        episodes=result.n,
        tool_calls=result.tool_calls,
        valid_calls=result.valid_calls,
        validity=result.validity,
        steps_per_success=result.steps_per_success,
        context_limited=sum(e.ended == "context_limit" for e in result.episodes),
        audits={k: v["flagged"] for k, v in summary["audits"].items() if v["flagged"]},
        eval_seconds=round(time.perf_counter() - trained, 1),
        passed_tasks=[e.task.task_id for e in result.episodes if e.passed],
        sample=sample(result.episodes[0]) if result.episodes else {},
    )
    return figures


def run(settings: LearnabilitySettings) -> dict[str, Any]:
    """The whole measurement (see the module docstring)."""
    environment = SandboxEnvironment()
    base = base_checkpoint(settings)
    rows, played = competent_rows(settings, environment)
    if not rows:
        raise SystemExit(f"the scripted agent passed none of {played} {settings.kind} tasks")
    examples = distillation_examples(rows)
    task_ids = heldout_task_ids(settings.heldout, settings.seed, [settings.kind])
    heldout = [make_agent_task(*parse_agent_task_id(t)) for t in task_ids]
    base_policy = load_policy(base)
    replay = settings.copy_replay_windows(base_policy)  # drawn once, the same for every budget
    report: dict[str, Any] = {
        "settings": json.loads(settings.model_dump_json(exclude={"cache"})),
        "base": base.name,
        "parameters": sum(p.numel() for p in base_policy.model.parameters()),
        "trajectories": {"played": played, "passed": len(rows), "examples": len(examples)},
        "heldout_overlap": heldout_overlap(train_tasks(settings), heldout),
        "sequence_lengths": sequence_lengths(base_policy, examples),
        "budgets": [],
    }
    print(json.dumps({k: v for k, v in report.items() if k != "budgets"}), flush=True)
    for steps in tqdm(settings.budgets, desc="budgets", unit="budget"):
        figures = budget_figures(settings, base, rows, steps, environment, task_ids, replay)
        report["budgets"].append(figures)
        print(table_line(settings, figures), flush=True)
    return report


def table_line(settings: LearnabilitySettings, f: Mapping[str, Any]) -> str:
    spst = f["steps_per_success"]
    return (
        f"{settings.preset} {settings.kind} {f['steps']:>5} steps: success {f['solved']}/"
        f"{f['episodes']}, valid calls {f['valid_calls']}/{f['tool_calls']}, steps/success "
        f"{'n/a' if spst is None else f'{spst:.2f}'}, train {f.get('train_seconds', 0)} s "
        f"({f.get('seconds_per_step', 0)} s/step), eval {f['eval_seconds']} s; e.g. "
        f"{json.dumps(f['sample'])}"
    )


def parse_settings(argv: Sequence[str] | None = None) -> LearnabilitySettings:
    """Settings from the command line; an option left out keeps the field's default."""
    parser = argparse.ArgumentParser(
        prog="scripts/agent_learnability.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kind", choices=get_args(AgentKind))
    parser.add_argument("--preset", choices=get_args(PresetName))
    parser.add_argument("--budgets", type=int, nargs="+", help="Distillation steps (0: base).")
    for name in (
        "pretrain_steps",
        "trajectories",
        "heldout",
        "seed",
        "max_steps",
        "max_new_tokens",
        "batch_size",
        "copy_replay",
        "copy_replay_len",
    ):
        parser.add_argument("--" + name.replace("_", "-"), type=int, dest=name)
    parser.add_argument("--lr", type=float)
    parser.add_argument(
        "--no-copy-curriculum",
        action="store_true",
        help="Base-train on code alone (the base before serving.copy_curriculum).",
    )
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--device", help="torch device (default: cpu).")
    parser.add_argument("--base", type=Path, help="A checkpoint directory to start from.")
    args = vars(parser.parse_args(argv))
    if args.pop("no_copy_curriculum"):
        args["pretrain_copy"] = CopySpec()
    given = {k: v for k, v in args.items() if v is not None}
    return LearnabilitySettings.model_validate(given)


def main(argv: Sequence[str] | None = None) -> int:
    report = run(parse_settings(argv))
    print(json.dumps(report, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
