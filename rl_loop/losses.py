"""The losses of the loop's training phases, on scores in ``rl_loop.scoring``'s layout
(``[B, T - 1]`` per-token tensors, a mask of the scored tokens). The TRL trainers
(``rl_loop.trainers``) and the reference loop of the benchmark (``rl_loop.reference_loop``)
compute exactly these.

SFT. Negative log-likelihood of the answer tokens, averaged per example first, then over the
batch (``per_example_mean``: one-word answers weigh as much as long code answers), else per
token.

On-policy RL. The replicas sampled G completions y_1..y_G of each prompt x and returned, per
token, the logprob under the weights they serve (``log pi_rollout``: bf16 kernels, vLLM's
sampler). Rewards come from plain functions (``rl_loop.rewards``). Advantage ``A_i = r_i -
mean_j r_j`` over the prompt's group (GRPO's baseline without the std scaling, which would blow
up near-uniform groups); a group whose rewards are all equal carries no signal. Per token t::

    rho_t  = exp(log pi_theta(y_t) - log pi_rollout(y_t))       # trainer vs rollout engine
    w_t    = min(rho_t, C)  (no gradient)                        # truncated IS, C = is_cap
    kl_t   = exp(d_t) - d_t - 1,  d_t = log pi_ref(y_t) - log pi_theta(y_t)   # k3, >= 0
    loss   = mean over tokens of ( -w_t * A_t * log pi_theta(y_t) + beta * kl_t )

``w_t`` corrects the on-policy gradient for the mismatch between the engine that sampled and
the trainer that differentiates (different kernels and precision; theta drifting over the
phase's steps), truncated so a token the rollout engine found unlikely cannot dominate a step.
The KL keeps theta near the served model (``pi_ref``, beta = ``kl_coef``). An engine logprob
that is unknown (NaN) takes the trainer's own: an IS ratio of 1.

On-policy distillation (when a teacher scored the sampled tokens, ``distill_weight`` > 0): the
per-token advantage gains ``lambda * (log pi_teacher(y_t) - log pi_theta(y_t))`` (no gradient
through it): the policy gradient of the reverse KL to the teacher on the student's own samples,
so ``A_t = A_i + lambda * (...)``; a sequence with a teacher trains even when its group is
uniform.

Hint self-distillation (Composer 2.5): for a completion the verifier rejected, the verifier's
feedback is added to the prompt, and the reference model given that hint is the teacher of the
policy without it, on the policy's own tokens: ``mean_t KL(pi_ref(. | x + hint, y<t) ||
pi_theta(. | x, y<t))`` over the whole vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rl_loop.rollouts import Rollout


def sft_loss(log_probs: torch.Tensor, mask: torch.Tensor, per_example_mean: bool) -> torch.Tensor:
    """Mean negative log-likelihood of the scored tokens (see the module docstring)."""
    weights = mask.to(log_probs.dtype)
    tokens = weights.sum(dim=1)
    if not per_example_mean:
        return -(log_probs * weights).sum() / tokens.sum().clamp(min=1)
    rows = tokens > 0
    per_example = (log_probs * weights).sum(dim=1)[rows] / tokens[rows]
    return -per_example.sum() / rows.sum().clamp(min=1)


def group_advantages(rollouts: Sequence[Rollout]) -> list[float]:
    """``r_i - mean(r of its group)`` for each rollout (0 for a group with equal rewards)."""
    by_group: dict[str, list[float]] = {}
    for r in rollouts:
        by_group.setdefault(r.group, []).append(r.reward)
    means = {g: sum(v) / len(v) for g, v in by_group.items()}
    return [r.reward - means[r.group] for r in rollouts]


@dataclass(frozen=True, slots=True)
class RlLossParts:
    """The RL loss and what it is made of (means over the scored tokens)."""

    loss: torch.Tensor
    policy_term: float
    kl: float
    mean_ratio: float
    truncated_share: float
    teacher_gap: float | None  # mean log pi_theta - log pi_teacher (reverse KL estimate)


def rl_loss(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    *,
    is_cap: float,
    kl_coef: float,
    teacher_log_probs: torch.Tensor | None = None,
    teacher_mask: torch.Tensor | None = None,
    distill_weight: float = 0.0,
) -> RlLossParts:
    """The RL loss (module docstring) over the tokens of ``mask``; ``advantages [B]``, every
    other tensor ``[B, T - 1]``; the teacher's logprobs count where ``teacher_mask`` is set."""
    weights = mask.to(log_probs.dtype)
    n_tokens = weights.sum().clamp(min=1)
    detached = log_probs.detach()
    engine = torch.where(torch.isnan(rollout_log_probs), detached, rollout_log_probs)
    ratio = torch.exp((detached - engine).clamp(max=20.0)) * weights
    weight = ratio.clamp(max=is_cap)
    adv = advantages.to(log_probs.dtype).unsqueeze(1).expand_as(log_probs)
    gap = None
    if teacher_log_probs is not None and teacher_mask is not None and distill_weight > 0:
        teacher_weights = teacher_mask.to(log_probs.dtype) * weights
        delta = (teacher_log_probs - detached) * teacher_weights
        adv = adv + distill_weight * delta
        gap = float((-delta.sum() / teacher_weights.sum().clamp(min=1)).item())
    policy_term = -(weight * adv * log_probs * weights).sum() / n_tokens
    d = (ref_log_probs - log_probs) * weights
    kl = ((torch.exp(d) - d - 1) * weights).sum() / n_tokens
    return RlLossParts(
        loss=policy_term + kl_coef * kl,
        policy_term=float(policy_term.item()),
        kl=float(kl.item()),
        mean_ratio=float((ratio.sum() / n_tokens).item()),
        truncated_share=float((((ratio > is_cap).to(weights.dtype)) * weights).sum().item())
        / float(n_tokens.item()),
        teacher_gap=gap,
    )


def hint_kl(student_log_dists: torch.Tensor, teacher_log_dists: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(teacher || student), both ``[N, V]`` log-distributions."""
    if len(student_log_dists) == 0:
        return student_log_dists.sum() * 0.0
    kl = (teacher_log_dists.exp() * (teacher_log_dists - student_log_dists)).sum(dim=-1)
    return kl.mean()
