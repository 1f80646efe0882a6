"""Real optimizer steps on a micro Qwen3-MoE: SFT learns a repeated batch; the RL loss (truncated
IS + KL to the current model) is finite and raises the logprobs of rewarded samples."""

from __future__ import annotations

import math
from pathlib import Path
from typing import get_args

import pytest
import torch

from rl_loop.config import GateConfig, LoopConfig, RlConfig, SftConfig
from rl_loop.evaluate import held_out_perplexity
from rl_loop.modeling import (
    Encoded,
    completion_logprobs,
    generate,
    hidden_states,
    load_policy,
    make_batch,
    save_checkpoint,
    shared_prefix_length,
)
from rl_loop.train import Rollout, group_advantages, rl_loss, train_rl, train_sft
from serving.build import read_version
from serving.training import ExpertsImplementation

MESSAGES = [
    [{"role": "system", "content": "Answer with the name."}, {"role": "user", "content": q}]
    for q in ("def alpha(x): return x", "def beta(y): return y", "def gamma(z): return z")
]


def test_sft_loss_decreases_on_a_repeated_batch(micro_model: Path) -> None:
    policy = load_policy(micro_model)
    examples = [
        Encoded(policy.encode_prompt(m), policy.encode_completion(a))
        for m, a in zip(MESSAGES, ["alpha", "beta", "gamma"], strict=True)
    ]
    config = SftConfig(steps=25, batch_size=3, lr=5e-3, warmup_steps=2, max_epochs=100)
    stats = train_sft(policy, examples, config)
    assert stats.steps == 25
    assert all(math.isfinite(v) for v in stats.losses)
    assert stats.losses[-1] < 0.6 * stats.losses[0]


def test_completion_logprobs_ignore_padding(micro_model: Path) -> None:
    policy = load_policy(micro_model)
    a = Encoded(policy.encode_prompt(MESSAGES[0]), policy.encode_completion("alpha"))
    b = Encoded(policy.encode_prompt(MESSAGES[1]), policy.encode_completion("a much longer one"))
    with torch.no_grad():
        alone = completion_logprobs(policy.model, make_batch([a], policy.pad_id, policy.device))
        both = completion_logprobs(policy.model, make_batch([a, b], policy.pad_id, policy.device))
    n = len(a.completion_ids)
    torch.testing.assert_close(alone[0, :n], both[0, :n], atol=1e-4, rtol=1e-4)
    assert both[0, n:].abs().sum() == 0


def test_a_shared_system_prompt_runs_once_with_the_same_values_and_gradients(
    micro_model: Path,
) -> None:
    policy = load_policy(micro_model)
    system = {"role": "system", "content": "You are a careful coding assistant. " * 4}
    examples = [
        Encoded(policy.encode_prompt([system, m[1]]), policy.encode_completion(a))
        for m, a in zip(MESSAGES, ["alpha", "beta", "a longer answer"], strict=True)
    ]
    batch = make_batch(examples, policy.pad_id, policy.device)
    assert shared_prefix_length(batch.input_ids) >= 16  # the fast path is taken

    def loss_and_grads(hidden: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        policy.model.zero_grad()
        loss = -completion_logprobs(policy.model, batch, hidden).sum()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in policy.model.parameters()]

    full = policy.model.model(input_ids=batch.input_ids).last_hidden_state
    shared = hidden_states(policy.model, batch)
    torch.testing.assert_close(shared, full, atol=1e-4, rtol=1e-4)
    loss_full, grads_full = loss_and_grads(full)
    loss_shared, grads_shared = loss_and_grads(hidden_states(policy.model, batch))
    torch.testing.assert_close(loss_shared, loss_full, atol=1e-4, rtol=1e-4)
    for a, b in zip(grads_shared, grads_full, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


def _rollouts(policy, samples: int) -> list[Rollout]:
    prompts = [policy.encode_prompt(m) for m in MESSAGES[:2]]
    out = []
    for g, prompt in enumerate(prompts):
        completions = generate(
            policy, [prompt] * samples, max_new_tokens=6, temperature=1.0, seed=g
        )
        batch = make_batch([Encoded(prompt, c) for c in completions], policy.pad_id, policy.device)
        with torch.no_grad():
            logp = completion_logprobs(policy.model, batch)
        for i, c in enumerate(completions):
            # The rollout engine's logprobs differ a little from the trainer's (bf16 kernels);
            # one token is far less likely there, so its IS weight must be truncated.
            engine = [float(v) - 0.01 for v in logp[i, : len(c)]]
            engine[0] -= 3.0
            reward = 0.75 if i < samples // 2 else -0.25
            out.append(Rollout(prompt, tuple(c), tuple(engine), f"p{g}", reward))
    return out


def _mean_logprob(policy, rollouts: list[Rollout]) -> float:
    batch = make_batch(
        [Encoded(r.prompt_ids, r.completion_ids) for r in rollouts], policy.pad_id, policy.device
    )
    with torch.no_grad():
        logp = completion_logprobs(policy.model, batch)
    return float((logp.sum() / batch.mask.sum()).item())


def test_rl_loss_is_finite_and_raises_rewarded_samples(micro_model: Path) -> None:
    policy = load_policy(micro_model)
    reference = policy.clone()
    rollouts = _rollouts(policy, samples=4)
    assert group_advantages(rollouts)[:4] == [0.5, 0.5, -0.5, -0.5]
    config = RlConfig(steps=8, batch_size=8, lr=3e-3, kl_coef=0.05, is_cap=2.0)
    parts = rl_loss(policy, reference, rollouts, group_advantages(rollouts), config)
    assert math.isfinite(parts.loss.item())
    assert parts.kl == pytest.approx(0.0, abs=1e-6)  # theta == reference at the start
    assert parts.truncated_share > 0  # the token the engine found unlikely hits the cap
    good = [r for r in rollouts if r.reward > 0]
    bad = [r for r in rollouts if r.reward < 0]
    before_good, before_bad = _mean_logprob(policy, good), _mean_logprob(policy, bad)
    stats = train_rl(policy, reference, rollouts, config)
    assert stats.steps == 8 and all(math.isfinite(v) for v in stats.losses)
    assert stats.extra["kl_last"] > 0
    assert _mean_logprob(policy, good) > before_good + 0.05
    assert _mean_logprob(policy, good) - before_good > _mean_logprob(policy, bad) - before_bad


def test_uniform_groups_carry_no_signal(micro_model: Path) -> None:
    policy = load_policy(micro_model)
    rollouts = [
        Rollout(r.prompt_ids, r.completion_ids, r.rollout_logprobs, r.group, -0.25)
        for r in _rollouts(policy, samples=2)
    ]
    stats = train_rl(policy, policy.clone(), rollouts, RlConfig(steps=3))
    assert stats.steps == 0 and stats.examples == 0


def test_candidate_checkpoint_round_trip(micro_model: Path, tmp_path: Path) -> None:
    policy = load_policy(micro_model)
    saved = save_checkpoint(policy, tmp_path, kind="ft", seed=1, metadata={"round": 0})
    version = read_version(saved)
    assert version.version_id.startswith("ft-")
    assert version.parent == read_version(micro_model).version_id
    assert version.probe is not None and version.metadata["round"] == 0
    reloaded = load_policy(saved)
    ppl = held_out_perplexity(reloaded, GateConfig(ppl_windows=2, ppl_seq_len=16))
    assert math.isfinite(ppl) and ppl > 1


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
        seq = Encoded(policy.encode_prompt(MESSAGES[0]), policy.encode_completion("alpha"))
        with torch.no_grad():
            batch = make_batch([seq], policy.pad_id, policy.device)
            logprobs[kernels] = completion_logprobs(policy.model, batch)
    for kernels in logprobs:
        torch.testing.assert_close(logprobs[kernels], logprobs["eager"], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
async def test_rollouts_from_a_replica_match_the_trainer(vllm_replica) -> None:
    """The replica's sampled tokens come back as ids with logprobs close to the trainer's own
    (bf16 kernels vs float32): the IS ratios the RL loss corrects with start near 1."""
    from rl_loop.datasets import PromptRecord
    from rl_loop.rollouts import collect_rollouts

    policy = load_policy(vllm_replica.model_dir)
    record = PromptRecord("r1", MESSAGES[0], {"family": "naming"}, {})
    samples = await collect_rollouts(
        [vllm_replica.base_url],
        vllm_replica.served_model_name,
        policy,
        [record],
        samples_per_prompt=3,
        temperature=1.0,
        max_tokens=8,
    )
    assert len(samples) == 3
    for s in samples:
        assert s.completion_ids and len(s.completion_ids) == len(s.logprobs)
        batch = make_batch([Encoded(s.prompt_ids, s.completion_ids)], policy.pad_id, policy.device)
        with torch.no_grad():
            trainer = completion_logprobs(policy.model, batch)[0, : len(s.completion_ids)]
        engine = torch.tensor(s.logprobs)
        known = ~torch.isnan(engine)
        assert (trainer[known] - engine[known]).abs().mean() < 0.1


def test_sft_replays_code_against_forgetting(micro_model: Path) -> None:
    from rl_loop.modeling import code_windows

    policy = load_policy(micro_model)
    examples = [Encoded(policy.encode_prompt(MESSAGES[0]), policy.encode_completion("alpha"))]
    replay = code_windows(str(micro_model), "train", 16, 20_000)
    assert replay.shape[1] == 17 and len(replay) > 10
    stats = train_sft(
        policy, examples, SftConfig(steps=4, batch_size=1, replay_windows=2), replay=replay
    )
    assert math.isfinite(stats.extra["replay_loss_first"])
    assert math.isfinite(stats.extra["replay_loss_last"])


def test_hint_conditioned_self_distillation_moves_towards_the_hinted_teacher(
    micro_model: Path,
) -> None:
    from rl_loop.loop import with_hint
    from rl_loop.train import hint_distill_loss

    policy = load_policy(micro_model)
    hinted = with_hint(MESSAGES[0], "the name is alpha")
    assert hinted[-1]["content"].endswith("the name is alpha") and MESSAGES[0] != hinted
    plain_ids, hint_ids = policy.encode_prompt(MESSAGES[0]), policy.encode_prompt(hinted)
    answer = policy.encode_completion("alpha")
    # A teacher that answers well once it has the hint (and the student does not know yet).
    reference = policy.clone()
    for p in reference.model.parameters():
        p.requires_grad_(True)
    teach = SftConfig(steps=20, batch_size=1, lr=5e-3, warmup_steps=1, max_epochs=100)
    train_sft(reference, [Encoded(hint_ids, answer)], teach)
    reference = reference.clone()
    rollouts = [
        Rollout(plain_ids, answer, tuple([-1.0] * len(answer)), "g", -0.25, hint_ids),
        Rollout(plain_ids, answer, tuple([-1.0] * len(answer)), "g", -0.25, hint_ids),
    ]  # every sample failed: no RL signal, only the hint's
    before = float(hint_distill_loss(policy, reference, rollouts).item())
    start = _mean_logprob(policy, rollouts[:1])
    stats = train_rl(policy, reference, rollouts, RlConfig(steps=10, lr=3e-3, hint_weight=1.0))
    assert stats.steps == 10
    assert float(hint_distill_loss(policy, reference, rollouts).item()) < 0.5 * before
    assert _mean_logprob(policy, rollouts[:1]) > start + 0.5  # learnt without the hint
