"""On-policy RL as a TRL-style trainer: our step (``rl_loop.losses``: truncated IS against the
rollout engine's logprobs, k3 KL to the served model, hint self-distillation, on-policy
distillation from a teacher's logprobs) on transformers' ``Trainer``, so accelerate runs it on
one CPU or on many GPUs (DDP, FSDP2, DeepSpeed ZeRO-3) and PEFT adapts it.

Why not TRL's GRPO or RLOO trainer. Both generate inside their training step, and correct for
the rollout engine only with TRL's own vLLM client (``use_vllm``: its ``vllm serve`` with an
NCCL weight-sync communicator); with a ``rollout_func`` and no ``use_vllm`` their importance
ratio against the engine's logprobs is off. Our rollouts come from the replicas that serve users
(stock vLLM, weights moved by our hot-swap after the gate), sampled once per round from the
served weights, then trained on for ``rl.steps`` steps: the truncated IS ratio against those
replicas' logprobs is what keeps that correct, so the step is ours and the engine is TRL's
(transformers ``Trainer`` + accelerate), like TRL's own trainers.

Data. One item per rollout that carries signal: a non-zero group advantage, a hint (when
``hint_weight`` > 0) or a teacher's logprobs (when ``distill_weight`` > 0). A batch is
right-padded in ``rl_loop.scoring``'s layout; the rollout and teacher logprobs sit on the label
positions; hinted items also come with their hinted prompt. The reference model is a frozen copy
of the served weights (with PEFT: the policy with its adapters disabled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainingArguments

from rl_loop.config import EngineConfig, RlConfig
from rl_loop.losses import group_advantages, hint_kl, rl_loss
from rl_loop.modeling import Encoded, Policy
from rl_loop.rollouts import Rollout
from rl_loop.scoring import CompletionScores, add_completion_scoring, make_batch
from rl_loop.trainers.engine import (
    BucketSampler,
    PhaseStats,
    common_arguments,
    phase_stats,
    prepare_reference,
    process_mean,
    process_sum,
    quiet,
)

ONPOLICY_METRICS = ("kl", "is_ratio", "truncated_share", "hint_kl", "teacher_gap")


def rollout_items(rollouts: Sequence[Rollout], config: RlConfig) -> list[dict[str, Any]]:
    """The trainer's dataset: the rollouts that carry signal, with their advantages."""
    items = []
    for r, advantage in zip(rollouts, group_advantages(rollouts), strict=True):
        hinted = config.hint_weight > 0 and r.hint_prompt_ids is not None
        taught = config.distill_weight > 0 and r.teacher_logprobs is not None
        if abs(advantage) > 1e-9 or hinted or taught:
            items.append({"rollout": r, "advantage": advantage, "hinted": hinted})
    return items


def _on_labels(labels: torch.Tensor, values: Sequence[Sequence[float] | None]) -> torch.Tensor:
    """Per-token values placed on each row's label positions, ``[B, T - 1]`` (NaN elsewhere)."""
    out = torch.full((labels.shape[0], labels.shape[1] - 1), math.nan)
    for i, row in enumerate(values):
        if row is not None:
            start = int((labels[i, 1:] != -100).nonzero()[0, 0])
            out[i, start : start + len(row)] = torch.tensor(list(row))
    return out


class RolloutCollator:
    """Items -> tensors (see the module docstring); tensors stay on the CPU."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, items: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rollouts: list[Rollout] = [item["rollout"] for item in items]
        cpu = torch.device("cpu")
        batch = make_batch(
            [Encoded(r.prompt_ids, r.completion_ids) for r in rollouts], self.pad_id, cpu
        )
        teacher = _on_labels(batch.labels, [r.teacher_logprobs for r in rollouts])
        hinted = [i for i, item in enumerate(items) if item["hinted"]]
        hint_seqs = [
            Encoded(rollouts[i].hint_prompt_ids or (), rollouts[i].completion_ids) for i in hinted
        ]
        # An empty hint batch still needs a shape: one pad token, sliced away below.
        hints = make_batch(hint_seqs or [Encoded((self.pad_id,), (self.pad_id,))], self.pad_id, cpu)
        return {
            "input_ids": batch.input_ids,
            "labels": batch.labels,
            "lengths": torch.tensor([len(r.prompt_ids) + len(r.completion_ids) for r in rollouts]),
            "rollout_logprobs": _on_labels(batch.labels, [r.rollout_logprobs for r in rollouts]),
            "advantages": torch.tensor([float(item["advantage"]) for item in items]),
            "teacher_logprobs": torch.nan_to_num(teacher, nan=0.0),
            "teacher_mask": ~torch.isnan(teacher),
            "hint_rows": torch.tensor(hinted, dtype=torch.long),
            "hint_input_ids": hints.input_ids[: len(hinted)],
            "hint_labels": hints.labels[: len(hinted)],
        }


def onpolicy_loss(
    scores: CompletionScores,
    ref_log_probs: torch.Tensor,
    teacher_dists: torch.Tensor | None,
    inputs: dict[str, torch.Tensor],
    config: RlConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The step's loss from the policy's scores (``log_dists`` when hints are used), the
    reference's logprobs and the hinted teacher's log-distributions; and its parts."""
    assert scores.log_probs is not None and scores.label_mask is not None
    log_probs, mask = scores.log_probs, scores.label_mask
    metrics: dict[str, float] = {}
    taught = inputs["teacher_mask"].any(dim=1) & (config.distill_weight > 0)
    rl_rows = (inputs["advantages"].abs() > 1e-9) | taught
    rl_mask = mask & rl_rows.unsqueeze(1)
    total = log_probs.sum() * 0.0  # connected to the model even when no term applies
    if bool(rl_mask.any()):
        parts = rl_loss(
            log_probs,
            ref_log_probs,
            inputs["rollout_logprobs"],
            rl_mask,
            inputs["advantages"],
            is_cap=config.is_cap,
            kl_coef=config.kl_coef,
            teacher_log_probs=inputs["teacher_logprobs"],
            teacher_mask=inputs["teacher_mask"],
            distill_weight=config.distill_weight,
        )
        total = total + parts.loss
        metrics.update(
            kl=parts.kl, is_ratio=parts.mean_ratio, truncated_share=parts.truncated_share
        )
        if parts.teacher_gap is not None:
            metrics["teacher_gap"] = parts.teacher_gap
    if teacher_dists is not None and scores.log_dists is not None:
        rows = mask.nonzero()[:, 0]
        student = scores.log_dists[torch.isin(rows, inputs["hint_rows"])]
        hint = hint_kl(student, teacher_dists)
        total = total + config.hint_weight * hint
        metrics["hint_kl"] = float(hint.item())
    return total, metrics


def _base_model(model: Any) -> PreTrainedModel:
    """The transformers model itself, under a PEFT wrapper if there is one."""
    base: PreTrainedModel = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base


class OnPolicyTrainer(Trainer):
    """Our on-policy step on transformers' ``Trainer`` (see the module docstring)."""

    # A per-batch mean: the Trainer divides it by the gradient accumulation steps.
    loss_is_scaled_for_ga = False

    def __init__(
        self,
        model: PreTrainedModel,
        reference: PreTrainedModel | None,
        args: TrainingArguments,
        items: list[dict[str, Any]],
        tokenizer: PreTrainedTokenizerBase,
        config: RlConfig,
        pad_id: int,
    ) -> None:
        add_completion_scoring(_base_model(model))
        super().__init__(
            model=model,
            args=args,
            data_collator=RolloutCollator(pad_id),
            train_dataset=items,  # type: ignore[arg-type]
            processing_class=tokenizer,
        )
        self.config = config
        self._metrics: dict[str, list[float]] = {}
        self.tokens_seen = 0.0
        self.reference: Any = None
        if reference is not None:
            add_completion_scoring(reference)
            self.reference = prepare_reference(self, reference)

    def _get_train_sampler(self, train_dataset: Any = None) -> BucketSampler:
        rollouts = [item["rollout"] for item in self.train_dataset]  # type: ignore[union-attr]
        return BucketSampler(
            [r.prompt_ids for r in rollouts],
            [len(r.prompt_ids) + len(r.completion_ids) for r in rollouts],
            self.args.train_batch_size * self.args.world_size,
            self.args.seed,
        )

    def _reference_scores(
        self, model: Any, input_ids: torch.Tensor, labels: torch.Tensor, log_dists: bool
    ) -> CompletionScores:
        """The frozen reference's scores (with PEFT: the policy, adapters disabled)."""
        target: Any = self.reference if self.reference is not None else model
        context: Any = nullcontext()
        if self.reference is None:
            unwrapped: Any = self.accelerator.unwrap_model(model)
            context = unwrapped.disable_adapter()
        with torch.no_grad(), context:
            out: CompletionScores = target(
                input_ids=input_ids,
                labels=labels,
                completion_scoring=True,
                log_dists=log_dists,
            )
        return out

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        use_hints = self.config.hint_weight > 0 and len(inputs["hint_rows"]) > 0
        self.tokens_seen += process_sum(self, inputs["lengths"].sum())
        scores = model(
            input_ids=inputs["input_ids"],
            labels=inputs["labels"],
            completion_scoring=True,
            log_dists=use_hints,
        )
        ref = self._reference_scores(model, inputs["input_ids"], inputs["labels"], False)
        teacher = None
        if use_hints:
            hinted = self._reference_scores(
                model, inputs["hint_input_ids"], inputs["hint_labels"], True
            )
            teacher = hinted.log_dists
        assert ref.log_probs is not None
        loss, metrics = onpolicy_loss(scores, ref.log_probs, teacher, inputs, self.config)
        for name in ONPOLICY_METRICS:  # every process logs the same names, in one order
            value = metrics.get(name, math.nan)
            self._metrics.setdefault(name, []).append(process_mean(self, value))
        return (loss, scores) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        for name, values in self._metrics.items():
            known = [v for v in values if not math.isnan(v)]
            if known:
                logs[name] = sum(known) / len(known)
        self._metrics.clear()
        super().log(logs, start_time)


def train_onpolicy(
    policy: Policy,
    reference: Policy | None,
    rollouts: Sequence[Rollout],
    config: RlConfig,
    *,
    output_dir: Path,
    seed: int = 0,
    device: str = "cpu",
    engine: EngineConfig | None = None,
) -> tuple[PhaseStats, OnPolicyTrainer | None]:
    """The RL phase on ``policy``'s model (``reference`` frozen; None with PEFT adapters);
    returns its figures and the trainer that ran it (None when there was nothing to do)."""
    items = rollout_items(rollouts, config)
    rewards = [r.reward for r in rollouts]
    extra = {
        "rollouts": float(len(rollouts)),
        "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
    }
    if not config.enabled or config.steps == 0 or not items:
        return PhaseStats(examples=len(items), extra=extra), None
    stats, trainer = train_items(
        policy, reference, items, config,
        output_dir=output_dir, seed=seed, device=device, engine=engine,
    )  # fmt: skip
    stats.extra.update(extra)
    return stats, trainer


def train_items(
    policy: Policy,
    reference: Policy | None,
    items: list[dict[str, Any]],
    config: RlConfig,
    *,
    output_dir: Path,
    seed: int = 0,
    device: str = "cpu",
    engine: EngineConfig | None = None,
) -> tuple[PhaseStats, OnPolicyTrainer | None]:
    """The RL phase on prepared items (:func:`rollout_items`' per-prompt groups, or agent
    episodes' advantages and hinted steps: ``rl_loop.agent.episode_rl``)."""
    if not config.enabled or config.steps == 0 or not items:
        return PhaseStats(examples=len(items)), None
    args = TrainingArguments(
        **common_arguments(
            output_dir=output_dir,
            steps=config.steps,
            batch_size=config.batch_size,
            lr=config.lr,
            grad_clip=config.grad_clip,
            seed=seed,
            device=device,
            engine=engine or EngineConfig(),
        )
    )
    trainer = OnPolicyTrainer(
        policy.model,
        reference.model if reference is not None else None,
        args,
        items,
        policy.tokenizer,
        config,
        policy.pad_id,
    )
    quiet(trainer)
    trainer.train()
    trainer.model.train(False)  # type: ignore[union-attr]
    return phase_stats(trainer, len(items), "loss", keep=ONPOLICY_METRICS), trainer
