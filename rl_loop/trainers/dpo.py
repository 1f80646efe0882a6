"""Preference training on TRL's ``DPOTrainer`` with the pairs the exporter builds from the record:
a user's edit chosen over the model's rejected answer, an accepted answer over a rejected one to
the same prompt (``traffic.export``'s ``preference_trl`` kind: ``prompt``, ``chosen``,
``rejected``, ``tools``; TRL's conversational format, read unchanged). Edited and rejected
answers, which SFT can only drop, become training signal.

The loss is TRL's (``loss_type``, by default ``sigmoid``: ``-log sigmoid(beta * (margin_theta -
margin_ref))`` where a margin is ``log pi(chosen) - log pi(rejected)``; ``ipo``, ``apo_zero``...
as TRL defines them; plus ``sft_weight`` times the chosen answers'
negative log-likelihood when set, TRL's ``sft`` loss type) against a frozen reference (in a
round: the served weights; with PEFT: the policy with its adapters disabled); the schedule and
optimizer are the loop's (``rl_loop.trainers.engine``). :func:`preference_margins` measures
what DPO moves: the policy's margin on pairs, e.g. held-out ones.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from trl.trainer.dpo_config import DPOConfig
from trl.trainer.dpo_trainer import DPOTrainer

from rl_loop.config import DpoConfig, EngineConfig
from rl_loop.modeling import Encoded, Policy
from rl_loop.scoring import label_logprobs, make_batch
from rl_loop.trainers.engine import (
    PhaseStats,
    WarmupCosineSchedule,
    common_arguments,
    phase_stats,
    quiet,
)
from rl_loop.trainers.placement import prepare_frozen

Pair = Mapping[str, Any]  # {"prompt": [...], "chosen": [turn], "rejected": [turn], "tools"?}


def dpo_rows(pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """Pairs as TRL reads them (tools as JSON text: rows of one table need not share a tool
    schema)."""
    return [
        {
            "prompt": list(p["prompt"]),
            "chosen": list(p["chosen"]),
            "rejected": list(p["rejected"]),
            "tools": json.dumps(p["tools"]) if p.get("tools") else None,
        }
        for p in pairs
    ]


class DpoTrainer(WarmupCosineSchedule, DPOTrainer):
    """TRL's ``DPOTrainer`` with the loop's schedule; no telemetry; under FSDP2 the reference
    sharded as the policy is (``placement.prepare_frozen``) as soon as the accelerator exists.
    TRL's own preparation (``trl.models.utils.prepare_fsdp``) shards only its root module and
    broadcasts nothing; it keeps a model that is already sharded as it is."""

    def __init__(self, *, ref_model: Any = None, **kwargs: Any) -> None:
        self._unprepared_reference = ref_model  # read when Trainer.__init__ builds the accelerator
        super().__init__(ref_model=ref_model, **kwargs)

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        reference, self._unprepared_reference = self._unprepared_reference, None
        plugin = getattr(self.accelerator.state, "fsdp_plugin", None)
        if reference is not None and plugin is not None and plugin.fsdp_version == 2:
            prepare_frozen(self.accelerator, reference)  # in place: the same module, sharded

    def _send_telemetry(self) -> None:
        """Nothing leaves the machine (see ``rl_loop.trainers.engine``)."""


def dpo_steps(config: DpoConfig, pairs: int) -> int:
    """Optimizer steps of a phase: ``steps``, fewer when ``max_epochs`` passes come first."""
    if pairs < config.min_pairs:
        return 0
    return min(config.steps, math.ceil(config.max_epochs * pairs / config.batch_size))


def train_dpo(
    policy: Policy,
    reference: Policy | None,
    pairs: Sequence[Pair],
    config: DpoConfig,
    *,
    output_dir: Path,
    seed: int = 0,
    device: str = "cpu",
    engine: EngineConfig | None = None,
    peft_config: Any = None,
) -> tuple[PhaseStats, DpoTrainer | None]:
    """DPO of ``policy``'s model on ``pairs`` (``reference`` frozen; None with PEFT); returns the
    figures and the trainer that ran it (its ``model`` a PEFT model when ``peft_config`` is
    given), None when there was nothing to do."""
    steps = dpo_steps(config, len(pairs))
    if steps == 0:
        return PhaseStats(examples=len(pairs)), None
    args = DPOConfig(
        **common_arguments(
            output_dir=output_dir,
            steps=steps,
            batch_size=config.batch_size,
            lr=config.lr,
            grad_clip=config.grad_clip,
            seed=seed,
            device=device,
            engine=engine or EngineConfig(),
        ),
        beta=config.beta,
        loss_type=[config.loss_type, "sft"] if config.sft_weight > 0 else [config.loss_type],
        loss_weights=[1.0, config.sft_weight] if config.sft_weight > 0 else None,
        # No MoE load-balancing loss (as before TRL): with it, TRL also turns the config's
        # output_router_logits on, which the saved checkpoint would keep.
        router_aux_loss_coef=0.0,
        max_length=None,
    )
    trainer = DpoTrainer(
        model=policy.model,
        ref_model=reference.model if reference is not None else None,
        args=args,
        train_dataset=Dataset.from_list(dpo_rows(pairs)),
        processing_class=policy.tokenizer,
        peft_config=peft_config,
    )
    trainer.warmup_steps, trainer.min_lr_ratio = config.warmup_steps, config.min_lr_ratio
    quiet(trainer)
    trainer.train()
    trainer.model.train(False)  # type: ignore[union-attr]
    return phase_stats(
        trainer, len(pairs), "loss", keep=("rewards/margins", "rewards/accuracies")
    ), trainer


def _turn_text(turns: Sequence[Mapping[str, Any]]) -> str:
    return str(turns[-1].get("content") or "")


@torch.no_grad()
def preference_margins(policy: Policy, pairs: Sequence[Pair]) -> list[float]:
    """``log pi(chosen) - log pi(rejected)`` of each pair's answer text (sums over the answer
    tokens, ``<|im_end|>`` included) under ``policy``."""
    margins = []
    was_training = policy.model.training
    policy.model.train(False)
    for p in pairs:
        tools = p.get("tools")
        prompt = policy.encode_prompt(p["prompt"], tools)
        seqs = [
            Encoded(prompt, policy.encode_completion(_turn_text(p[side])))
            for side in ("chosen", "rejected")
        ]
        logp = label_logprobs(policy.model, make_batch(seqs, policy.pad_id, policy.device))
        chosen, rejected = logp.sum(dim=1).tolist()
        margins.append(chosen - rejected)
    policy.model.train(was_training)
    return margins
