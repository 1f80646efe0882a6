"""Training a candidate from the record: on-policy RL on the served model's own samples, then
SFT / distillation on accepted answers.

The algorithm
-------------
Start. theta = the checkpoint the replicas serve now, in float32; pi_ref = a frozen copy of it
(the "current model" of the KL penalty).

Phase 1, RL (when rollouts are given and ``rl.enabled``). The replicas sampled G completions
y_1..y_G of each prompt x at ``rl.temperature`` and returned, per token, the logprob under the
weights they serve (``log pi_rollout``: bf16 kernels, vLLM's sampler). Rewards come from plain
functions (``rl_loop.rewards``): +0.75 when the verifier accepts the answer, -0.25 when it
rejects it, plus a penalty for degenerate answers. Advantage ``A_i = r_i - mean_j r_j`` over the
prompt's group (GRPO's baseline without the std scaling, which would blow up near-uniform
groups); a group whose rewards are all equal carries no signal and is dropped. Per token t of
y_i::

    rho_t  = exp(log pi_theta(y_t) - log pi_rollout(y_t))       # trainer vs rollout engine
    w_t    = min(rho_t, C)  (no gradient)                        # truncated IS, C = rl.is_cap
    kl_t   = exp(d_t) - d_t - 1,  d_t = log pi_ref(y_t) - log pi_theta(y_t)   # k3, >= 0
    loss   = mean over tokens of ( -w_t * A_i * log pi_theta(y_t) + beta * kl_t )

Optional hint term (``rl.hint_weight``, on-policy self-distillation as in Composer 2.5): for a
completion the verifier rejected, the verifier's feedback is added to the prompt as a hint, and
the current model given that hint is the teacher of the policy without it, on the policy's own
tokens: ``+ hint_weight * mean_t KL(pi_ref(. | x + hint, y<t) || pi_theta(. | x, y<t))``.

``w_t`` corrects the on-policy gradient for the mismatch between the engine that sampled and
the trainer that differentiates (different kernels and precision; theta drifting over the
phase's steps), truncated so a token the rollout engine found unlikely cannot dominate a step.
The KL keeps theta near the served model (beta = ``rl.kl_coef``). ``rl.steps`` AdamW steps
over shuffled minibatches of ``rl.batch_size`` completions.

Phase 2, SFT. Cross-entropy on the completion tokens (answer + ``<|im_end|>``) of accepted
answers from the record (frontier answers: distillation; user edits; the local model's own
accepted answers: self-distillation), prompts as the chat template renders them. Loss averaged
per example, then over the batch (``sft.per_example_mean``), so one-word answers count as much as
long code answers. Replay: each step also trains ``sft.replay_windows`` windows of the base
training's code corpus with the plain LM loss; answers alone make a small model forget how to
model code within a few hundred steps (held-out perplexity x400 in our first runs).
AdamW (betas 0.9/0.95, weight decay on matrices only), linear warm-up then cosine decay to
``min_lr_ratio * lr`` (``serving.training``, shared with base training), gradient-norm clipping;
examples drawn from a seeded permutation, a new one each epoch.

The result is saved as a new checkpoint (bf16, probe included) whose parent is the served one;
the gate (``rl_loop.evaluate``) decides whether it is promoted.

The same code runs on a GPU (``LoopConfig.device``); nothing here assumes the CPU.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from rl_loop.config import RlConfig, SftConfig
from rl_loop.modeling import (
    Encoded,
    Policy,
    completion_log_dists,
    completion_logprobs,
    hidden_states,
    lm_loss,
    make_batch,
    prompt_nll,
)
from serving.training import adamw, set_lr, warmup_cosine_lr


@dataclass(frozen=True, slots=True)
class Rollout:
    """One sampled completion with the rollout engine's logprob of each of its tokens."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    rollout_logprobs: tuple[float, ...]
    group: str  # completions of one prompt share a group (the baseline's scope)
    reward: float = 0.0
    hint_prompt_ids: tuple[int, ...] | None = None  # the prompt with the verifier's feedback

    def __post_init__(self) -> None:
        if len(self.completion_ids) != len(self.rollout_logprobs):
            raise ValueError("one rollout logprob per completion token is needed")


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


def sft_loss(
    policy: Policy,
    examples: Sequence[Encoded],
    per_example_mean: bool,
    prompt_loss_weight: float = 0.0,
) -> torch.Tensor:
    """Mean negative log-likelihood of the completions of ``examples`` (plus, weighted, of
    their prompt tokens)."""
    batch = make_batch(examples, policy.pad_id, policy.device)
    hidden = hidden_states(policy.model, batch)
    logp = completion_logprobs(policy.model, batch, hidden)
    tokens = batch.mask.sum(dim=1).clamp(min=1)
    per_example = (logp.sum(dim=1) / tokens).mean()
    loss = -(per_example if per_example_mean else logp.sum() / tokens.sum())
    if prompt_loss_weight > 0:
        loss = loss + prompt_loss_weight * prompt_nll(policy.model, batch, hidden)
    return loss


BUCKET_BATCHES = 8  # batches drawn together and cut by length, to keep padding small
PREFIX_KEY = 96  # leading prompt tokens that group a batch (one system prompt shared per batch)


def length_buckets(
    examples: Sequence[Encoded], batch_size: int, rng: random.Random
) -> list[list[int]]:
    """One epoch of batches (indices): a seeded shuffle, then every ``BUCKET_BATCHES`` batches'
    worth of examples sorted by their first ``PREFIX_KEY`` prompt tokens (the system prompt, so a
    batch shares it and ``hidden_states`` runs it once), then by length, and cut into batches,
    whose order is shuffled again.
    Prompts here range from ~150 to ~450 tokens; a batch padded to its longest member would
    spend most of its compute on padding."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    size = batch_size * BUCKET_BATCHES
    batches: list[list[int]] = []
    for start in range(0, len(order), size):
        chunk = sorted(
            order[start : start + size],
            key=lambda i: (
                examples[i].prompt_ids[:PREFIX_KEY],
                len(examples[i].prompt_ids) + len(examples[i].completion_ids),
            ),
        )
        batches += [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def train_sft(
    policy: Policy,
    examples: Sequence[Encoded],
    config: SftConfig,
    seed: int = 0,
    replay: torch.Tensor | None = None,
) -> PhaseStats:
    """Phase 2 of the algorithm on ``policy`` in place; ``replay`` holds code windows
    (``[n, L + 1]``) trained with the plain LM loss beside the answers."""
    stats = PhaseStats(examples=len(examples))
    steps = min(config.steps, math.ceil(config.max_epochs * len(examples) / config.batch_size))
    if steps == 0 or not examples:
        return stats
    use_replay = replay is not None and len(replay) > 0 and config.replay_windows > 0
    replay_losses: list[float] = []
    started = time.perf_counter()
    optimizer = adamw(policy.model, config.lr, config.weight_decay)
    rng = random.Random(seed)
    batches: list[list[int]] = []
    policy.model.train()
    for step in range(steps):
        if not batches:
            batches = length_buckets(examples, config.batch_size, rng)
        picked = [examples[i] for i in batches.pop()]
        lr = warmup_cosine_lr(
            step,
            steps=steps,
            peak=config.lr,
            warmup_steps=config.warmup_steps,
            min_lr_ratio=config.min_lr_ratio,
        )
        set_lr(optimizer, lr)
        loss = sft_loss(policy, picked, config.per_example_mean, config.prompt_loss_weight)
        stats.losses.append(float(loss.item()))
        if use_replay:
            assert replay is not None
            rows = [rng.randrange(len(replay)) for _ in range(config.replay_windows)]
            code = lm_loss(policy.model, replay[rows].to(policy.device))
            replay_losses.append(float(code.item()))
            loss = loss + config.replay_weight * code
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), config.grad_clip)
        optimizer.step()
        stats.steps += 1
    policy.model.train(False)
    stats.seconds = time.perf_counter() - started
    if replay_losses:
        stats.extra["replay_loss_first"] = replay_losses[0]
        stats.extra["replay_loss_last"] = replay_losses[-1]
    return stats


def group_advantages(rollouts: Sequence[Rollout]) -> list[float]:
    """``r_i - mean(r of its group)`` for each rollout (0 for a group with equal rewards)."""
    by_group: dict[str, list[float]] = {}
    for r in rollouts:
        by_group.setdefault(r.group, []).append(r.reward)
    means = {g: sum(v) / len(v) for g, v in by_group.items()}
    return [r.reward - means[r.group] for r in rollouts]


@dataclass(frozen=True, slots=True)
class RlLossParts:
    """The RL loss and what it is made of (means over completion tokens)."""

    loss: torch.Tensor
    policy_term: float
    kl: float
    mean_ratio: float
    truncated_share: float


def rl_loss(
    policy: Policy,
    reference: Policy,
    rollouts: Sequence[Rollout],
    advantages: Sequence[float],
    config: RlConfig,
) -> RlLossParts:
    """Phase 1's loss on a minibatch (see the module docstring)."""
    seqs = [Encoded(r.prompt_ids, r.completion_ids) for r in rollouts]
    batch = make_batch(seqs, policy.pad_id, policy.device)
    logp = completion_logprobs(policy.model, batch)
    with torch.no_grad():
        ref_logp = completion_logprobs(reference.model, batch)
    rollout_logp = torch.zeros_like(logp)
    for i, r in enumerate(rollouts):
        rollout_logp[i, : len(r.rollout_logprobs)] = torch.tensor(r.rollout_logprobs)
    # Unknown engine logprobs (NaN) take the trainer's own: IS ratio 1.
    rollout_logp = torch.where(torch.isnan(rollout_logp), logp.detach(), rollout_logp)
    mask = batch.mask.float()
    n_tokens = mask.sum().clamp(min=1)
    ratio = torch.exp((logp.detach() - rollout_logp).clamp(max=20.0)) * mask
    weight = ratio.clamp(max=config.is_cap)
    adv = torch.tensor(list(advantages), dtype=logp.dtype, device=logp.device).unsqueeze(1)
    policy_term = -(weight * adv * logp * mask).sum() / n_tokens
    d = (ref_logp - logp) * mask
    kl = ((torch.exp(d) - d - 1) * mask).sum() / n_tokens
    loss = policy_term + config.kl_coef * kl
    return RlLossParts(
        loss=loss,
        policy_term=float(policy_term.item()),
        kl=float(kl.item()),
        mean_ratio=float((ratio.sum() / n_tokens).item()),
        truncated_share=float((((ratio > config.is_cap).float() * mask).sum() / n_tokens).item()),
    )


def hint_distill_loss(
    policy: Policy, reference: Policy, rollouts: Sequence[Rollout]
) -> torch.Tensor:
    """Phase 1's optional hint term: mean over completion tokens of
    KL(reference given the hint || policy without it), over the whole vocabulary."""
    plain = make_batch(
        [Encoded(r.prompt_ids, r.completion_ids) for r in rollouts], policy.pad_id, policy.device
    )
    hinted = make_batch(
        [Encoded(r.hint_prompt_ids or r.prompt_ids, r.completion_ids) for r in rollouts],
        policy.pad_id,
        policy.device,
    )
    student = completion_log_dists(policy.model, plain)
    with torch.no_grad():
        teacher = completion_log_dists(reference.model, hinted)
    kl = (teacher.exp() * (teacher - student)).sum(dim=-1)
    mask = plain.mask.float()
    return (kl * mask).sum() / mask.sum().clamp(min=1)


def train_rl(
    policy: Policy, reference: Policy, rollouts: Sequence[Rollout], config: RlConfig, seed: int = 0
) -> PhaseStats:
    """Phase 1 of the algorithm on ``policy`` in place; ``reference`` stays frozen."""
    advantages = group_advantages(rollouts)
    useful = [(r, a) for r, a in zip(rollouts, advantages, strict=True) if abs(a) > 1e-9]
    hinted = [r for r in rollouts if r.hint_prompt_ids is not None]
    use_hints = config.hint_weight > 0 and bool(hinted)
    stats = PhaseStats(examples=len(useful))
    stats.extra["rollouts"] = float(len(rollouts))
    stats.extra["mean_reward"] = (
        sum(r.reward for r in rollouts) / len(rollouts) if rollouts else 0.0
    )
    if not config.enabled or config.steps == 0 or not (useful or use_hints):
        return stats
    hint_losses: list[float] = []
    started = time.perf_counter()
    optimizer = adamw(policy.model, config.lr, 0.0)
    rng = random.Random(seed)
    order: list[int] = []
    kls: list[float] = []
    ratios: list[float] = []
    truncated: list[float] = []
    policy.model.train()
    for _ in range(config.steps):
        loss = torch.zeros((), device=policy.device)
        if useful:
            if len(order) < min(config.batch_size, len(useful)):
                fresh = list(range(len(useful)))
                rng.shuffle(fresh)
                order.extend(fresh)
            picked = [useful[i] for i in order[: config.batch_size]]
            del order[: config.batch_size]
            batch, advs = [r for r, _ in picked], [a for _, a in picked]
            parts = rl_loss(policy, reference, batch, advs, config)
            loss = loss + parts.loss
            kls.append(parts.kl)
            ratios.append(parts.mean_ratio)
            truncated.append(parts.truncated_share)
        if use_hints:
            sample = rng.sample(hinted, min(config.batch_size, len(hinted)))
            hint = hint_distill_loss(policy, reference, sample)
            hint_losses.append(float(hint.item()))
            loss = loss + config.hint_weight * hint
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), config.grad_clip)
        optimizer.step()
        stats.losses.append(float(loss.item()))
        stats.steps += 1
    policy.model.train(False)
    stats.seconds = time.perf_counter() - started
    if kls:
        stats.extra.update(
            kl_last=kls[-1],
            mean_is_ratio=sum(ratios) / len(ratios),
            truncated_share=sum(truncated) / len(truncated),
        )
    if hint_losses:
        stats.extra.update(hint_kl_first=hint_losses[0], hint_kl_last=hint_losses[-1])
    return stats
