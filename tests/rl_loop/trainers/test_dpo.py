"""DPO on TRL's DPOTrainer with the pairs the exporter builds from the record: the local model's
rejected answers with the users' edits become pairs, and DPO on the earlier ones widens the
preference margin on the later, held-out ones."""

from __future__ import annotations

import math
from pathlib import Path

from rl_loop.config import DataConfig, DpoConfig
from rl_loop.datasets import build_round_data
from rl_loop.modeling import load_policy
from rl_loop.trainers.dpo import preference_margins, train_dpo
from tests.traffic.store.scenario import day, inference
from traffic.store import FeedbackRecord, StoreBackend

FUNCTIONS = ["parse", "load", "dump", "merge", "split", "render", "close", "flush", "fetch"]


async def _record_edits(store: StoreBackend) -> None:
    """Each day the local model answers a naming question evasively; the user rejects the
    answer and types the name."""
    rows = []
    for d, name in enumerate(FUNCTIONS * 2, start=1):
        question = f"def {name}_{d}(x): ...\nWhat is this function's name?"
        rows.append(
            inference(
                day(1 + d // 24, d % 24),
                request={"model": "auto", "messages": [{"role": "user", "content": question}]},
                response={
                    "choices": [
                        {"message": {"role": "assistant", "content": "I cannot tell, sorry."}}
                    ]
                },
                route_target="local",
                tags={"family": "function_name"},
            )
        )
    await store.insert_inferences(rows)
    feedback = []
    for i, row in enumerate(rows):
        text = f"{FUNCTIONS[i % len(FUNCTIONS)]}_{i + 1}"
        feedback += [
            FeedbackRecord(inference_id=row.id, kind="rejected", ts=row.ts),
            FeedbackRecord(inference_id=row.id, kind="edited", ts=row.ts, payload={"text": text}),
        ]
    await store.insert_feedback(feedback)


async def test_dpo_on_exported_pairs_widens_the_held_out_margin(
    store: StoreBackend, micro_model: Path, tmp_path: Path
) -> None:
    await _record_edits(store)
    data = await build_round_data(store, DataConfig(eval_fraction=0.25), pairs=True)
    assert len(data.pairs_train) >= 12 and len(data.pairs_eval) >= 3
    pair = data.pairs_train[0]
    assert pair["rejected"] == [{"role": "assistant", "content": "I cannot tell, sorry."}]
    assert pair["chosen"][0]["content"].startswith(FUNCTIONS[0])

    policy, reference = load_policy(micro_model), load_policy(micro_model)
    held_out_before = preference_margins(policy, data.pairs_eval)
    config = DpoConfig(steps=20, batch_size=4, lr=3e-3, warmup_steps=2, max_epochs=100)
    stats, trainer = train_dpo(policy, reference, data.pairs_train, config, output_dir=tmp_path)
    assert trainer is not None and stats.steps == 20
    assert all(math.isfinite(v) for v in stats.losses)
    assert stats.losses[-1] < stats.losses[0]
    assert stats.extra["rewards/margins_last"] > stats.extra["rewards/margins_first"]
    held_out_after = preference_margins(policy, data.pairs_eval)
    assert all(a > b + 1.0 for a, b in zip(held_out_after, held_out_before, strict=True))


def test_too_few_pairs_skip_the_phase(micro_model: Path, tmp_path: Path) -> None:
    policy = load_policy(micro_model)
    pair = {
        "prompt": [{"role": "user", "content": "name?"}],
        "chosen": [{"role": "assistant", "content": "parse"}],
        "rejected": [{"role": "assistant", "content": "no idea"}],
    }
    stats, trainer = train_dpo(policy, None, [pair], DpoConfig(steps=5), output_dir=tmp_path)
    assert trainer is None and stats.steps == 0 and stats.examples == 1
