"""Token scoring on a micro Qwen3-MoE: padding changes nothing, a shared system prompt runs once
with the same values and gradients, and the scoring forward that trainers call through their
accelerate wrapper is the same computation (the plain forward untouched)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import get_args

import pytest
import torch

from rl_loop.config import LoopConfig
from rl_loop.modeling import Encoded, Policy, load_policy
from rl_loop.scoring import (
    add_completion_scoring,
    hidden_states,
    label_logprobs,
    make_batch,
    restore_forward,
    score,
    shared_prefix_length,
)
from serving.training import ExpertsImplementation

MESSAGES = [
    [{"role": "system", "content": "Answer with the name."}, {"role": "user", "content": q}]
    for q in ("def alpha(x): return x", "def beta(y): return y", "def gamma(z): return z")
]


def _examples(policy: Policy, system: dict[str, str] | None = None) -> list[Encoded]:
    out = []
    for m, a in zip(MESSAGES, ["alpha", "beta", "a longer answer"], strict=True):
        prompt = [system, m[1]] if system else m
        out.append(Encoded(policy.encode_prompt(prompt), policy.encode_completion(a)))
    return out


def test_label_logprobs_ignore_padding(micro_model: Path) -> None:
    policy = load_policy(micro_model)
    a, b = _examples(policy)[0], _examples(policy)[2]
    with torch.no_grad():
        alone = label_logprobs(policy.model, make_batch([a], policy.pad_id, policy.device))
        both = make_batch([a, b], policy.pad_id, policy.device)
        together = label_logprobs(policy.model, both)
    n = len(a.prompt_ids) + len(a.completion_ids) - 1
    torch.testing.assert_close(alone[0, :n], together[0, :n], atol=1e-4, rtol=1e-4)
    assert int(both.mask[0].sum()) == len(a.completion_ids)
    assert together[0][~both.mask[0]].abs().sum() == 0


def test_a_shared_system_prompt_runs_once_with_the_same_values_and_gradients(
    micro_model: Path,
) -> None:
    policy = load_policy(micro_model)
    system = {"role": "system", "content": "You are a careful coding assistant. " * 4}
    batch = make_batch(_examples(policy, system), policy.pad_id, policy.device)
    assert shared_prefix_length(batch.input_ids) >= 16  # the fast path is taken

    def loss_and_grads(fast: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        policy.model.zero_grad()
        if fast:
            hidden = hidden_states(policy.model, batch.input_ids)
        else:
            hidden = policy.model.model(input_ids=batch.input_ids).last_hidden_state
        logits = policy.model.lm_head(hidden[:, :-1][batch.mask])
        targets = batch.labels[:, 1:][batch.mask]
        loss = torch.nn.functional.cross_entropy(logits, targets)
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        grads = []
        for p in policy.model.parameters():
            assert p.grad is not None  # every parameter takes part in the loss
            grads.append(p.grad.clone())
        return loss.detach(), grads

    loss_full, grads_full = loss_and_grads(fast=False)
    loss_shared, grads_shared = loss_and_grads(fast=True)
    torch.testing.assert_close(loss_shared, loss_full, atol=1e-4, rtol=1e-4)
    for a, b in zip(grads_shared, grads_full, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


def test_the_scoring_forward_is_the_scoring_and_leaves_the_plain_forward_alone(
    micro_model: Path,
) -> None:
    policy = load_policy(micro_model)
    batch = make_batch(_examples(policy), policy.pad_id, policy.device)
    windows = batch.input_ids[:2, :17]
    with torch.no_grad():
        plain_before = policy.model(input_ids=batch.input_ids).logits
        expected = score(policy.model, batch, log_dists=True, lm_windows=windows)
        add_completion_scoring(policy.model)
        add_completion_scoring(policy.model)  # a second patch is a no-op
        got = policy.model(
            input_ids=batch.input_ids,
            labels=batch.labels,
            completion_scoring=True,
            log_dists=True,
            lm_windows=windows,
        )
        plain_after = policy.model(input_ids=batch.input_ids).logits
    torch.testing.assert_close(got.log_probs, expected.log_probs)
    torch.testing.assert_close(got.log_dists, expected.log_dists)
    torch.testing.assert_close(got.lm_loss, expected.lm_loss)
    assert got.log_dists.shape == (int(batch.mask.sum()), policy.model.config.vocab_size)
    torch.testing.assert_close(plain_after, plain_before)

    # A deep copy (the frozen reference, a saved checkpoint) runs its own weights.
    twin = copy.deepcopy(policy.model)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
        assert not torch.allclose(twin(input_ids=batch.input_ids).logits, plain_before)
    restore_forward(policy.model)
    assert "forward" not in policy.model.__dict__
    add_completion_scoring(policy.model)  # restored, it can be patched again


def test_the_loop_config_picks_the_experts_kernels_with_the_same_logprobs(
    micro_model: Path, tmp_path: Path
) -> None:
    assert LoopConfig(work_dir=tmp_path).experts_implementation == "eager"
    with pytest.raises(ValueError, match="experts_implementation"):
        LoopConfig.model_validate({"work_dir": tmp_path, "experts_implementation": "fastest"})
    logprobs = {}
    for kernels in get_args(ExpertsImplementation):
        config = LoopConfig(work_dir=tmp_path, experts_implementation=kernels)
        policy = load_policy(micro_model, config.device, config.experts_implementation)
        assert policy.model.config._experts_implementation == kernels
        batch = make_batch(_examples(policy)[:1], policy.pad_id, policy.device)
        with torch.no_grad():
            logprobs[kernels] = label_logprobs(policy.model, batch)
    for kernels in logprobs:
        torch.testing.assert_close(logprobs[kernels], logprobs["eager"], atol=1e-5, rtol=1e-5)
