"""SFT / distillation on TRL's ``SFTTrainer``: accepted answers from the record (frontier
answers: distillation; user edits; the local model's own accepted answers: self-distillation).

Data. TRL's conversational prompt-completion format, as the exporter gives it: ``prompt`` (the
chat messages the served model saw), ``completion`` (the one assistant turn to learn: text or
tool calls) and ``tools`` (the tools the request offered, as JSON: the chat template lists them
in the system turn exactly as vLLM rendered them). TRL renders prompt + completion with the
checkpoint's own chat template and its completion mask keeps the loss on the assistant turn
alone (``completion_only_loss``); earlier assistant turns of a conversation are context, not
targets (nobody judged them).

Loss. ``rl_loop.losses.sft_loss`` (per-example mean by default) through ``rl_loop.scoring``'s
forward instead of TRL's fused LM head (measured faster on this model, see there). Replay: each
step also trains ``replay_windows`` windows of the base training's code corpus with the plain LM
loss, in the same forward; answers alone make a small model forget how to model code within a
few hundred steps (held-out perplexity x400 in our first runs). Every process draws the same
windows (one seeded stream) and takes its share of them, so N processes replay what one does.

Schedule and optimizer: ``rl_loop.trainers.engine`` (linear warm-up then cosine decay to
``min_lr_ratio * lr``; AdamW); batches from its bucketed order; at most ``max_epochs`` passes.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl.trainer.sft_config import SFTConfig as TrlSftConfig
from trl.trainer.sft_trainer import SFTTrainer

from rl_loop.config import EngineConfig, SftConfig
from rl_loop.datasets import SftExample
from rl_loop.losses import sft_loss
from rl_loop.modeling import Policy
from rl_loop.scoring import add_completion_scoring
from rl_loop.trainers.engine import (
    BucketSampler,
    PhaseStats,
    WarmupCosineSchedule,
    common_arguments,
    phase_stats,
    process_mean,
    process_sum,
    quiet,
)


def sft_rows(examples: Sequence[SftExample]) -> list[dict[str, Any]]:
    """Examples in TRL's conversational prompt-completion format (tools as JSON text: rows of
    one table need not share a tool schema)."""
    rows = []
    for ex in examples:
        turn: dict[str, Any] = {"role": "assistant", "content": ex.answer}
        if ex.tool_calls:
            turn["tool_calls"] = ex.tool_calls
        rows.append(
            {
                "prompt": ex.prompt,
                "completion": [turn],
                "tools": json.dumps(ex.tools) if ex.tools else None,
            }
        )
    return rows


def train_dataset_ending_at(dataset: Any, stop_id: int) -> Any:
    """Each tokenized example cut after its last labelled ``stop_id`` (``<|im_end|>``): the chat
    template renders a newline after the end of the turn, which the server never generates (it
    stops at ``<|im_end|>``), so it is neither trained nor run."""

    def cut(example: dict[str, Any]) -> dict[str, Any]:
        labels = example["labels"]
        ends = [i for i, label in enumerate(labels) if label == stop_id]
        if not ends:
            return {}
        return {"input_ids": example["input_ids"][: ends[-1] + 1], "labels": labels[: ends[-1] + 1]}

    return dataset.map(cut)


def _first_label(labels: list[int]) -> int:
    return next((k for k, label in enumerate(labels) if label != -100), len(labels))


class SftTrainer(WarmupCosineSchedule, SFTTrainer):
    """TRL's ``SFTTrainer`` with the loop's loss, replay, schedule and batch order."""

    # A per-batch mean: the Trainer divides it by the gradient accumulation steps.
    loss_is_scaled_for_ga = False  # type: ignore[assignment]

    def __init__(
        self,
        *,
        model: PreTrainedModel,
        args: TrlSftConfig,
        train_dataset: Dataset,
        tokenizer: PreTrainedTokenizerBase,
        config: SftConfig,
        stop_id: int,
        replay: torch.Tensor | None = None,
        peft_config: Any = None,
    ) -> None:
        add_completion_scoring(model)
        self.warmup_steps, self.min_lr_ratio = config.warmup_steps, config.min_lr_ratio
        self.config = config
        super().__init__(
            model=model,
            args=args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
        )
        self.train_dataset = train_dataset_ending_at(self.train_dataset, stop_id)
        use = replay is not None and len(replay) > 0 and config.replay_windows > 0
        self.replay = replay if use else None
        self.replay_rng = random.Random(f"{args.seed}:replay")
        self.tokens_seen = 0.0

    def _send_telemetry(self) -> None:
        """Nothing leaves the machine (see ``rl_loop.trainers.engine``)."""

    def _get_train_sampler(self, train_dataset: Any = None) -> BucketSampler:
        dataset: Any = self.train_dataset
        ids: list[list[int]] = dataset["input_ids"]
        labels: list[list[int]] = dataset["labels"]
        prompts = [i[: _first_label(row)] for i, row in zip(ids, labels, strict=True)]
        return BucketSampler(
            prompts,
            [len(i) for i in ids],
            self.args.train_batch_size * self.args.world_size,
            self.args.seed,
        )

    def _replay_windows(self, device: torch.device) -> torch.Tensor | None:
        if self.replay is None:
            return None
        rows = replay_rows(self.replay_rng, len(self.replay), self.config.replay_windows)
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        share = -(-len(rows) // world)
        return self.replay[rows[rank * share : (rank + 1) * share]].to(device)

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        ids = inputs["input_ids"]
        self.tokens_seen += process_sum(self, inputs["attention_mask"].sum())
        out = model(
            input_ids=ids,
            labels=inputs["labels"],
            completion_scoring=True,
            lm_windows=self._replay_windows(ids.device),
        )
        loss = sft_loss(out.log_probs, out.label_mask, self.config.per_example_mean)
        metrics = self._metrics["train"]
        metrics["answer_loss"].append(process_mean(self, loss))
        if out.lm_loss is not None:
            metrics["replay_loss"].append(process_mean(self, out.lm_loss))
            loss = loss + self.config.replay_weight * out.lm_loss
        return (loss, out) if return_outputs else loss


def replay_rows(rng: random.Random, corpus: int, windows: int) -> list[int]:
    """One step's replay windows (indices into the corpus)."""
    return [rng.randrange(corpus) for _ in range(windows)]


def sft_steps(config: SftConfig, examples: int) -> int:
    """Optimizer steps of a phase: ``steps``, fewer when ``max_epochs`` passes come first."""
    return min(config.steps, math.ceil(config.max_epochs * examples / config.batch_size))


def train_sft(
    policy: Policy,
    examples: Sequence[SftExample],
    config: SftConfig,
    *,
    output_dir: Path,
    seed: int = 0,
    replay: torch.Tensor | None = None,
    device: str = "cpu",
    engine: EngineConfig | None = None,
    max_length: int | None = None,
    peft_config: Any = None,
) -> tuple[PhaseStats, SftTrainer | None]:
    """The SFT phase on ``policy``'s model; returns its figures and the trainer that ran it
    (its ``model``: the policy's own, or a PEFT model wrapping it when ``peft_config`` is
    given), None when there was nothing to do."""
    steps = sft_steps(config, len(examples))
    if steps == 0:
        return PhaseStats(examples=len(examples)), None
    args = TrlSftConfig(
        **common_arguments(
            output_dir=output_dir,
            steps=steps,
            batch_size=config.batch_size,
            lr=config.lr,
            grad_clip=config.grad_clip,
            seed=seed,
            device=device,
            engine=engine or EngineConfig(),
            weight_decay=config.weight_decay,
        ),
        max_length=max_length,
        completion_only_loss=True,
        # No MoE load-balancing loss (as before TRL): with it, TRL also turns the config's
        # output_router_logits on, which the saved checkpoint would keep.
        router_aux_loss_coef=0.0,
        packing=False,
    )
    trainer = SftTrainer(
        model=policy.model,
        args=args,
        train_dataset=Dataset.from_list(sft_rows(examples)),
        tokenizer=policy.tokenizer,
        config=config,
        stop_id=policy.eos_id,
        replay=replay,
        peft_config=peft_config,
    )
    quiet(trainer)
    trainer.train()
    trainer.model.train(False)  # type: ignore[union-attr]
    return phase_stats(trainer, len(examples), "answer_loss", keep=("replay_loss",)), trainer
