"""On-policy RL as a TRL-style trainer, real optimizer steps on a micro Qwen3-MoE: the loss
(truncated IS against the rollout engine, KL to the served model) raises rewarded samples, a
uniform group teaches nothing, the verifier's hint and a teacher's logprobs distil into the
policy, and the trainer takes exactly the steps of the plain reference loop."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rl_loop import reference_loop
from rl_loop.config import RlConfig, SftConfig
from rl_loop.datasets import SftExample
from rl_loop.loop import with_hint
from rl_loop.losses import group_advantages, hint_kl, rl_loss
from rl_loop.modeling import Encoded, Policy, generate, load_policy
from rl_loop.rollouts import Rollout
from rl_loop.scoring import label_logprobs, make_batch, score
from rl_loop.trainers.onpolicy import train_onpolicy
from rl_loop.trainers.sft import train_sft

MESSAGES = [
    [{"role": "system", "content": "Answer with the name."}, {"role": "user", "content": q}]
    for q in ("def alpha(x): return x", "def beta(y): return y")
]


def _logprobs(
    policy: Policy, prompt: tuple[int, ...], completions: list[tuple[int, ...]]
) -> list[list[float]]:
    batch = make_batch([Encoded(prompt, c) for c in completions], policy.pad_id, policy.device)
    with torch.no_grad():
        logp = label_logprobs(policy.model, batch)
    return [logp[i][batch.mask[i]].tolist() for i in range(len(completions))]


def _rollouts(policy: Policy, samples: int = 4) -> list[Rollout]:
    out = []
    for g, messages in enumerate(MESSAGES):
        prompt = policy.encode_prompt(messages)
        completions = generate(
            policy, [prompt] * samples, max_new_tokens=6, temperature=1.0, seed=g
        )
        trainer_logprobs = _logprobs(policy, prompt, completions)
        for i, (c, trainer) in enumerate(zip(completions, trainer_logprobs, strict=True)):
            # The rollout engine's logprobs differ a little from the trainer's (bf16 kernels);
            # one token is far less likely there, so its IS weight must be truncated.
            engine = [v - 0.01 for v in trainer]
            engine[0] -= 3.0
            reward = 0.75 if i < samples // 2 else -0.25
            out.append(Rollout(prompt, tuple(c), tuple(engine), f"p{g}", reward))
    return out


def _mean_logprob(policy: Policy, rollouts: list[Rollout]) -> float:
    values = [v for r in rollouts for v in _logprobs(policy, r.prompt_ids, [r.completion_ids])[0]]
    return sum(values) / len(values)


def test_rl_raises_rewarded_samples_with_truncated_is_and_kl(
    micro_model: Path, tmp_path: Path
) -> None:
    policy, reference = load_policy(micro_model), load_policy(micro_model)
    rollouts = _rollouts(policy)
    assert group_advantages(rollouts)[:4] == [0.5, 0.5, -0.5, -0.5]
    batch = make_batch(
        [Encoded(r.prompt_ids, r.completion_ids) for r in rollouts], policy.pad_id, policy.device
    )
    logp = label_logprobs(policy.model, batch)
    engine = torch.full_like(logp, math.nan)
    for i, r in enumerate(rollouts):
        engine[i][batch.mask[i]] = torch.tensor(r.rollout_logprobs)
    parts = rl_loss(
        logp,
        logp.detach(),
        engine,
        batch.mask,
        torch.tensor(group_advantages(rollouts)),
        is_cap=2.0,
        kl_coef=0.05,
    )
    assert math.isfinite(parts.loss.item())
    assert parts.kl == pytest.approx(0.0, abs=1e-6)  # theta == reference at the start
    assert parts.truncated_share > 0  # the token the engine found unlikely hits the cap

    good = [r for r in rollouts if r.reward > 0]
    bad = [r for r in rollouts if r.reward < 0]
    before_good, before_bad = _mean_logprob(policy, good), _mean_logprob(policy, bad)
    config = RlConfig(steps=8, batch_size=8, lr=3e-3, kl_coef=0.05, is_cap=2.0)
    stats, trainer = train_onpolicy(policy, reference, rollouts, config, output_dir=tmp_path)
    assert trainer is not None and stats.steps == 8
    assert all(math.isfinite(v) for v in stats.losses)
    assert stats.extra["kl_last"] > 0 and stats.extra["truncated_share_first"] > 0
    assert _mean_logprob(policy, good) > before_good + 0.05
    assert _mean_logprob(policy, good) - before_good > _mean_logprob(policy, bad) - before_bad


def test_the_trainer_takes_the_reference_loops_steps(micro_model: Path, tmp_path: Path) -> None:
    config = RlConfig(steps=4, batch_size=4, lr=3e-3, kl_coef=0.05)
    losses = []
    for engine in ("trl", "reference"):
        policy, reference = load_policy(micro_model), load_policy(micro_model)
        rollouts = _rollouts(policy)
        if engine == "trl":
            stats, _ = train_onpolicy(policy, reference, rollouts, config, output_dir=tmp_path)
        else:
            stats = reference_loop.train_rl(policy, reference, rollouts, config)
        losses.append(stats.losses)
    assert len(losses[0]) == 4
    assert losses[0] == pytest.approx(losses[1], rel=1e-4, abs=1e-6)


def test_uniform_groups_carry_no_signal(micro_model: Path, tmp_path: Path) -> None:
    policy = load_policy(micro_model)
    rollouts = [
        Rollout(r.prompt_ids, r.completion_ids, r.rollout_logprobs, r.group, -0.25)
        for r in _rollouts(policy, samples=2)
    ]
    stats, trainer = train_onpolicy(
        policy, load_policy(micro_model), rollouts, RlConfig(steps=3), output_dir=tmp_path
    )
    assert trainer is None and stats.steps == 0 and stats.examples == 0


def _teacher(micro_model: Path, prompt: list[dict[str, str]], answer: str, tmp: Path) -> Policy:
    """A model that answers ``answer`` to ``prompt`` (and the student does not know yet)."""
    teacher = load_policy(micro_model)
    teach = SftConfig(
        steps=20, batch_size=1, lr=5e-3, warmup_steps=1, max_epochs=100, replay_windows=0
    )
    train_sft(teacher, [SftExample(prompt, answer)], teach, output_dir=tmp)
    return teacher


def test_hint_conditioned_self_distillation_moves_towards_the_hinted_teacher(
    micro_model: Path, tmp_path: Path
) -> None:
    policy = load_policy(micro_model)
    hinted = with_hint(MESSAGES[0], "the name is alpha")
    assert hinted[-1]["content"].endswith("the name is alpha") and MESSAGES[0] != hinted
    plain_ids, hint_ids = policy.encode_prompt(MESSAGES[0]), policy.encode_prompt(hinted)
    answer = policy.encode_completion("alpha")
    reference = _teacher(micro_model, hinted, "alpha", tmp_path / "teacher")
    rollouts = [
        Rollout(plain_ids, answer, tuple([-1.0] * len(answer)), "g", -0.25, hint_ids),
        Rollout(plain_ids, answer, tuple([-1.0] * len(answer)), "g", -0.25, hint_ids),
    ]  # every sample failed: no RL signal, only the hint's

    def hint_gap() -> float:
        plain = make_batch([Encoded(plain_ids, answer)], policy.pad_id, policy.device)
        with_hints = make_batch([Encoded(hint_ids, answer)], policy.pad_id, policy.device)
        with torch.no_grad():
            teacher = score(reference.model, with_hints, log_dists=True).log_dists
            student = score(policy.model, plain, log_dists=True).log_dists
            assert student is not None and teacher is not None  # asked for: log_dists=True
            return float(hint_kl(student, teacher).item())

    before, start = hint_gap(), _mean_logprob(policy, rollouts[:1])
    config = RlConfig(steps=10, lr=3e-3, hint_weight=1.0)
    stats, _ = train_onpolicy(policy, reference, rollouts, config, output_dir=tmp_path / "rl")
    assert stats.steps == 10 and stats.extra["hint_kl_last"] < stats.extra["hint_kl_first"]
    assert hint_gap() < 0.5 * before
    assert _mean_logprob(policy, rollouts[:1]) > start + 0.5  # learnt without the hint


def test_on_policy_distillation_follows_the_teachers_logprobs(
    micro_model: Path, tmp_path: Path
) -> None:
    """The student's own samples, scored by a teacher (as a teacher replica's prompt logprobs
    would be): the reverse KL to the teacher falls even though every group is uniform."""
    teacher = _teacher(micro_model, MESSAGES[0], "alpha", tmp_path / "teacher")
    student = load_policy(micro_model)
    prompt = student.encode_prompt(MESSAGES[0])
    completions = generate(student, [prompt] * 8, max_new_tokens=4, temperature=1.0, seed=5)
    completions.append(student.encode_completion("alpha"))
    rollouts = [
        Rollout(prompt, tuple(c), tuple(own), "g", 0.0, teacher_logprobs=tuple(taught))
        for c, own, taught in zip(
            completions,
            _logprobs(student, prompt, completions),
            _logprobs(teacher, prompt, completions),
            strict=True,
        )
    ]

    def gap() -> float:  # mean log pi_student - log pi_teacher over the samples' tokens
        own = _logprobs(student, prompt, completions)
        pairs = [
            (o, t)
            for r, row in zip(rollouts, own, strict=True)
            for o, t in zip(row, r.teacher_logprobs or (), strict=True)
        ]
        return sum(o - t for o, t in pairs) / len(pairs)

    before = gap()
    config = RlConfig(steps=12, batch_size=9, lr=3e-3, kl_coef=0.0, distill_weight=1.0)
    reference = load_policy(micro_model)
    stats, _ = train_onpolicy(student, reference, rollouts, config, output_dir=tmp_path / "rl")
    assert stats.steps == 12 and "teacher_gap_first" in stats.extra
    assert abs(gap()) < 0.5 * abs(before)
    answer = rollouts[-1]
    assert _mean_logprob(student, [answer]) > _mean_logprob(load_policy(micro_model), [answer])
