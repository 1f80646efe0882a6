"""Rollouts from a real vLLM CPU replica: the sampled tokens come back as ids with logprobs close
to the trainer's own, and a teacher replica scores them token by token (on-policy
distillation's input)."""

from __future__ import annotations

import pytest
import torch

from rl_loop.datasets import PromptRecord
from rl_loop.modeling import Encoded, load_policy
from rl_loop.rollouts import collect_rollouts, teacher_logprobs
from rl_loop.scoring import label_logprobs, make_batch

MESSAGES = [
    {"role": "system", "content": "Answer with the name."},
    {"role": "user", "content": "def alpha(x): return x"},
]


@pytest.mark.slow
async def test_rollouts_match_the_trainer_and_a_teacher_scores_them(vllm_replica) -> None:
    """The IS ratios the RL loss corrects with start near 1 (bf16 kernels vs float32); the
    same weights as a teacher give the sampled tokens the logprobs they were sampled with."""
    policy = load_policy(vllm_replica.model_dir)
    record = PromptRecord("r1", MESSAGES, {"family": "naming"}, {})
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
    taught = await teacher_logprobs(vllm_replica.base_url, vllm_replica.served_model_name, samples)
    for s, teacher in zip(samples, taught, strict=True):
        assert s.completion_ids and len(s.completion_ids) == len(s.logprobs) == len(teacher)
        batch = make_batch([Encoded(s.prompt_ids, s.completion_ids)], policy.pad_id, policy.device)
        with torch.no_grad():
            trainer = label_logprobs(policy.model, batch)[0][batch.mask[0]]
        engine = torch.tensor(s.logprobs)
        known = ~torch.isnan(engine)
        assert (trainer[known] - engine[known]).abs().mean() < 0.1
        assert (torch.tensor(teacher) - trainer).abs().mean() < 0.1
