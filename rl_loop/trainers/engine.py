"""What every trainer of the loop shares on TRL + accelerate: the arguments built from our
configs, the learning-rate schedule, the batch order, the reference model's preparation, and
the figures a phase reports.

- Arguments. ``batch_size`` in our configs is the global batch (examples per optimizer step);
  each of accelerate's processes takes ``batch_size / num_processes`` of it, so one process and
  N processes take the same optimizer steps on the same examples. The optimizer is TRL's /
  transformers' AdamW with ``serving.training``'s betas and epsilon; no checkpoints are written
  by the trainer (the loop saves a versioned checkpoint itself), nothing is reported anywhere.
- Schedule. ``serving.training.warmup_cosine_lr``, the one base training uses, as a
  ``LambdaLR`` (``WarmupCosineSchedule``).
- Batch order. A seeded shuffle per epoch, padded to whole global batches by repeating its first
  examples (as ``DistributedSampler`` pads), then every ``BUCKET_BATCHES`` batches sorted by
  their first ``PREFIX_KEY`` tokens (the system prompt: a batch shares it and
  ``rl_loop.scoring`` runs it once) and length (little padding), cut into batches whose order
  is shuffled again. Accelerate hands consecutive per-process slices of that order to its
  processes, so every global batch is one bucket whatever the number of processes.
- Reference model. Frozen, placed like the policy (``rl_loop.trainers.placement``): DeepSpeed
  partitions it, FSDP2 shards it per layer with rank 0's weights broadcast, otherwise it is only
  moved to the device.
- Telemetry. TRL pings the Hub from its trainers' ``__init__``; ours never do: training data and
  topology stay on the machine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import Sampler
from transformers import PreTrainedModel, Trainer
from transformers.trainer_callback import PrinterCallback

from rl_loop.config import EngineConfig
from rl_loop.trainers.placement import prepare_frozen
from serving.training import ADAM_BETAS, ADAM_EPS, warmup_cosine_lr

BUCKET_BATCHES = 8  # batches drawn together and cut by length, to keep padding small
PREFIX_KEY = 96  # leading prompt tokens that group a batch (one system prompt shared per batch)


class TrainingError(Exception):
    """A training phase cannot run as configured (the message says what to set)."""


@dataclass(slots=True)
class PhaseStats:
    """Figures of one training phase, for the round's report."""

    steps: int = 0
    examples: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def first_loss(self) -> float | None:
        return self.losses[0] if self.losses else None

    @property
    def last_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "examples": self.examples,
            "seconds": round(self.seconds, 1),
            "first_loss": self.first_loss,
            "last_loss": self.last_loss,
            **self.extra,
        }


def distributed_state(device: str) -> PartialState:
    """accelerate's state of this process: the processes ``accelerate launch`` (or torchrun)
    started, gloo between CPU processes. The first call decides (the state is shared), so a
    CLI makes it before anything else asks."""
    return PartialState(cpu=device == "cpu")


def common_arguments(
    *,
    output_dir: Path,
    steps: int,
    batch_size: int,
    lr: float,
    grad_clip: float,
    seed: int,
    device: str,
    engine: EngineConfig,
    weight_decay: float = 0.0,
) -> dict[str, Any]:
    """``TrainingArguments`` fields every phase sets the same way (see the module docstring)."""
    world = int(distributed_state(device).num_processes)
    if batch_size % world:
        raise TrainingError(
            f"batch_size {batch_size} does not split over {world} processes: set a multiple of "
            f"{world}"
        )
    return {
        "output_dir": str(output_dir),
        "max_steps": steps,
        "per_device_train_batch_size": batch_size // world,
        "gradient_accumulation_steps": 1,
        "learning_rate": lr,
        "weight_decay": weight_decay,
        "max_grad_norm": grad_clip,
        "optim": "adamw_torch",
        "adam_beta1": ADAM_BETAS[0],
        "adam_beta2": ADAM_BETAS[1],
        "adam_epsilon": ADAM_EPS,
        "lr_scheduler_type": "constant",
        "logging_strategy": "steps",
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "seed": seed,
        "data_seed": seed,
        "use_cpu": device == "cpu",
        "bf16": engine.bf16,
        "gradient_checkpointing": engine.gradient_checkpointing,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "remove_unused_columns": False,
        # Every parameter takes part in each forward (a MoE's experts are one tensor per layer),
        # so DDP need not walk the graph for unused ones.
        "ddp_find_unused_parameters": False,
    }


class WarmupCosineSchedule(Trainer):
    """A trainer whose learning rate follows ``serving.training.warmup_cosine_lr``."""

    warmup_steps: int = 0
    min_lr_ratio: float = 1.0

    def create_scheduler(
        self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None
    ) -> Any:
        if self.lr_scheduler is None:
            warmup, ratio = self.warmup_steps, self.min_lr_ratio

            def factor(step: int) -> float:
                return warmup_cosine_lr(
                    step,
                    steps=num_training_steps,
                    peak=1.0,
                    warmup_steps=warmup,
                    min_lr_ratio=ratio,
                )

            target = optimizer or self.optimizer
            assert target is not None
            self.lr_scheduler = LambdaLR(target, factor)
        return self.lr_scheduler


def bucketed_order(
    prompts: Sequence[Sequence[int]], lengths: Sequence[int], batch_size: int, rng: random.Random
) -> list[int]:
    """One epoch of example indices, whole batches of ``batch_size`` in a row (see the module
    docstring)."""
    order = list(range(len(prompts)))
    rng.shuffle(order)
    if not order:
        return []
    short = -len(order) % batch_size
    order += (order * (short // len(order) + 1))[:short]
    size = batch_size * BUCKET_BATCHES
    batches: list[list[int]] = []
    for start in range(0, len(order), size):
        chunk = sorted(
            order[start : start + size],
            key=lambda i: (tuple(prompts[i][:PREFIX_KEY]), lengths[i]),
        )
        batches += [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return [i for batch in batches for i in batch]


class BucketSampler(Sampler[int]):
    """:func:`bucketed_order`, a new one each epoch, for a trainer's data loader."""

    def __init__(
        self,
        prompts: Sequence[Sequence[int]],
        lengths: Sequence[int],
        batch_size: int,
        seed: int,
    ) -> None:
        self.prompts, self.lengths = prompts, lengths
        self.batch_size, self.seed = batch_size, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        rng = random.Random(f"{self.seed}:{self.epoch}")
        return iter(bucketed_order(self.prompts, self.lengths, self.batch_size, rng))

    def __len__(self) -> int:
        return len(self.prompts) + (-len(self.prompts) % self.batch_size)


def _gathered(trainer: Trainer, value: torch.Tensor | float) -> torch.Tensor:
    device = trainer.accelerator.device
    local = torch.as_tensor(value, dtype=torch.float32, device=device).detach().reshape(1)
    gathered: torch.Tensor = trainer.accelerator.gather(local)
    return gathered


def process_mean(trainer: Trainer, value: torch.Tensor | float) -> float:
    """The mean of a per-process figure over every process (what a log line should show)."""
    return float(_gathered(trainer, value).mean().item())


def process_sum(trainer: Trainer, value: torch.Tensor | float) -> float:
    """The sum of a per-process count over every process."""
    return float(_gathered(trainer, value).sum().item())


def quiet(trainer: Trainer) -> None:
    """No log line per step on stdout (``disable_tqdm`` makes transformers print each one); the
    figures stay in ``trainer.state.log_history`` and the phase's report."""
    trainer.remove_callback(PrinterCallback)


def prepare_reference(trainer: Trainer, reference: PreTrainedModel) -> Any:
    """The frozen reference model placed like the policy (``placement.prepare_frozen``)."""
    return prepare_frozen(trainer.accelerator, reference)


def phase_stats(
    trainer: Trainer, examples: int, loss_key: str, keep: Sequence[str] = ()
) -> PhaseStats:
    """A finished run's figures from its log: ``loss_key`` per step (``loss`` when a step did
    not log it), the first and last values of the logged metrics named in ``keep``, and the
    tokens the trainer counted (``tokens_seen``: real tokens of every process's batches)."""
    steps = [h for h in trainer.state.log_history if "loss" in h and "step" in h]
    stats = PhaseStats(steps=trainer.state.global_step, examples=examples)
    stats.losses = [float(h.get(loss_key, h["loss"])) for h in steps]
    summary = next((h for h in trainer.state.log_history if "train_runtime" in h), {})
    stats.seconds = float(summary.get("train_runtime", 0.0))
    tokens = getattr(trainer, "tokens_seen", 0.0)
    if tokens:
        stats.extra["tokens"] = float(tokens)
    for key in keep:
        values = [float(h[key]) for h in steps if key in h]
        if values:
            stats.extra[f"{key}_first"], stats.extra[f"{key}_last"] = values[0], values[-1]
    return stats
