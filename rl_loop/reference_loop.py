"""The previous hand-written training loops (one process, plain torch), kept as the baseline of
``loadtests.bench.train`` and nowhere else: the loop trains on TRL + accelerate
(``rl_loop.trainers``).

They compute the same losses as the trainers (``rl_loop.losses`` through ``rl_loop.scoring``),
with the same batch order (``rl_loop.trainers.engine.bucketed_order``), learning-rate schedule
(``serving.training``) and optimizer settings, so a benchmark of the two measures the engines,
not two algorithms: tokens per second, memory, and the loss each reaches on the same data.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from rl_loop.config import RlConfig, SftConfig
from rl_loop.datasets import encode_sft, sft_examples, within_caps
from rl_loop.losses import sft_loss
from rl_loop.modeling import Encoded, Policy, code_windows, load_policy, save_checkpoint
from rl_loop.rollouts import Rollout
from rl_loop.scoring import Batch, make_batch, score
from rl_loop.train import (
    REPLAY_CORPUS_BYTES,
    TrainJob,
    peak_rss_mb,
    read_jsonl,
    read_rollouts,
)
from rl_loop.trainers.engine import PhaseStats, bucketed_order
from rl_loop.trainers.onpolicy import RolloutCollator, onpolicy_loss, rollout_items
from rl_loop.trainers.sft import replay_rows, sft_steps
from serving.training import adamw, set_lr, warmup_cosine_lr


def batches(
    prompts: Sequence[Sequence[int]], lengths: Sequence[int], batch_size: int, seed: int
) -> Iterator[list[int]]:
    """The trainers' batches, epoch after epoch, for ever."""
    epoch = 0
    while True:
        order = bucketed_order(prompts, lengths, batch_size, random.Random(f"{seed}:{epoch}"))
        yield from (order[i : i + batch_size] for i in range(0, len(order), batch_size))
        epoch += 1


def train_sft(
    policy: Policy,
    examples: Sequence[Encoded],
    config: SftConfig,
    seed: int = 0,
    replay: torch.Tensor | None = None,
) -> PhaseStats:
    """SFT of ``policy`` in place (``rl_loop.trainers.sft``'s maths, one process)."""
    stats = PhaseStats(examples=len(examples))
    steps = sft_steps(config, len(examples))
    if steps == 0:
        return stats
    use_replay = replay is not None and len(replay) > 0 and config.replay_windows > 0
    replay_losses: list[float] = []
    started = time.perf_counter()
    optimizer = adamw(policy.model, config.lr, config.weight_decay)
    rng = random.Random(f"{seed}:replay")
    order = batches(
        [e.prompt_ids for e in examples],
        [len(e.prompt_ids) + len(e.completion_ids) for e in examples],
        config.batch_size,
        seed,
    )
    policy.model.train()
    tokens = 0
    for step in range(steps):
        picked = [examples[i] for i in next(order)]
        tokens += sum(len(e.prompt_ids) + len(e.completion_ids) for e in picked)
        lr = warmup_cosine_lr(
            step,
            steps=steps,
            peak=config.lr,
            warmup_steps=config.warmup_steps,
            min_lr_ratio=config.min_lr_ratio,
        )
        set_lr(optimizer, lr)
        windows = None
        if use_replay:
            assert replay is not None
            windows = replay[replay_rows(rng, len(replay), config.replay_windows)]
            windows = windows.to(policy.device)
        out = score(
            policy.model,
            make_batch(picked, policy.pad_id, policy.device),
            lm_windows=windows,
        )
        assert out.log_probs is not None and out.label_mask is not None
        loss = sft_loss(out.log_probs, out.label_mask, config.per_example_mean)
        stats.losses.append(float(loss.item()))
        if out.lm_loss is not None:
            replay_losses.append(float(out.lm_loss.item()))
            loss = loss + config.replay_weight * out.lm_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), config.grad_clip)
        optimizer.step()
        stats.steps += 1
    policy.model.train(False)
    stats.seconds = time.perf_counter() - started
    stats.extra["tokens"] = float(tokens)
    if replay_losses:
        stats.extra["replay_loss_first"] = replay_losses[0]
        stats.extra["replay_loss_last"] = replay_losses[-1]
    return stats


def train_rl(
    policy: Policy, reference: Policy, rollouts: Sequence[Rollout], config: RlConfig, seed: int = 0
) -> PhaseStats:
    """The RL phase on ``policy`` in place (``rl_loop.trainers.onpolicy``'s maths, one
    process); ``reference`` stays frozen."""
    items = rollout_items(rollouts, config)
    stats = PhaseStats(examples=len(items))
    if not config.enabled or config.steps == 0 or not items:
        return stats
    started = time.perf_counter()
    optimizer = adamw(policy.model, config.lr, 0.0)
    collate = RolloutCollator(policy.pad_id)
    order = batches(
        [item["rollout"].prompt_ids for item in items],
        [len(i["rollout"].prompt_ids) + len(i["rollout"].completion_ids) for i in items],
        config.batch_size,
        seed,
    )
    device = policy.device
    policy.model.train()
    tokens = 0.0
    for _ in range(config.steps):
        inputs = {k: v.to(device) for k, v in collate([items[i] for i in next(order)]).items()}
        tokens += float(inputs["lengths"].sum())
        use_hints = config.hint_weight > 0 and len(inputs["hint_rows"]) > 0
        plain = Batch(inputs["input_ids"], inputs["labels"])
        scores = score(policy.model, plain, log_dists=use_hints)
        with torch.no_grad():
            ref = score(reference.model, plain)
            hinted = Batch(inputs["hint_input_ids"], inputs["hint_labels"])
            teacher = None
            if use_hints:
                teacher = score(reference.model, hinted, log_dists=True).log_dists
        assert ref.log_probs is not None
        loss, metrics = onpolicy_loss(scores, ref.log_probs, teacher, inputs, config)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), config.grad_clip)
        optimizer.step()
        stats.losses.append(float(loss.item()))
        for name, value in metrics.items():
            stats.extra.setdefault(f"{name}_first", value)
            stats.extra[f"{name}_last"] = value
        stats.steps += 1
    policy.model.train(False)
    stats.seconds = time.perf_counter() - started
    stats.extra["tokens"] = tokens
    return stats


def run_job(job: TrainJob) -> dict[str, Any]:
    """A job's RL and SFT phases through these loops (one process), saved and reported like
    ``rl_loop.train.run_job`` (``<work_dir>/result.json``)."""
    if job.threads is not None:
        torch.set_num_threads(job.threads)
    config = job.loop
    started = time.perf_counter()
    policy = load_policy(job.model, config.device, config.experts_implementation)
    stats: dict[str, PhaseStats] = {}
    rollouts = read_rollouts(job.rollouts) if job.rollouts else []
    if config.rl.enabled and config.rl.steps > 0 and rollouts:
        reference = load_policy(job.model, config.device, config.experts_implementation)
        stats["rl"] = train_rl(policy, reference, rollouts, config.rl, seed=config.seed)
    if config.sft.steps > 0 and job.sft_data:
        kept, _ = within_caps(policy, sft_examples(read_jsonl(job.sft_data)), config.data)
        replay = None
        if config.sft.replay_windows > 0:
            replay = code_windows(
                str(job.model), "train", config.sft.replay_seq_len, REPLAY_CORPUS_BYTES
            )
        examples = encode_sft(policy, kept)
        stats["sft"] = train_sft(policy, examples, config.sft, seed=config.seed, replay=replay)
    out = config.work_dir
    phases = {name: s.to_json() for name, s in stats.items()}
    result: dict[str, Any] = {
        "processes": 1,
        "phases": phases,
        "losses": {name: s.losses for name, s in stats.items()},
        "seconds": round(time.perf_counter() - started, 1),
        "peak_rss_mb": peak_rss_mb(),
        "checkpoint": str(
            save_checkpoint(
                policy,
                out / "checkpoints",
                kind=config.checkpoint_kind,
                seed=config.seed,
                metadata={
                    "kind": "reference-loop",
                    "phases": {k: s.to_json() for k, s in stats.items()},
                },
            )
        ),
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
