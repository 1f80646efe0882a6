"""What base training and the RL loop share: the schedule, AdamW's groups, the float32 loader."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from serving.build import ensure_demo_model
from serving.training import adamw, held_out_loss, load_float32, set_lr, warmup_cosine_lr
from tests.fixtures.vllm_fixture import cache_dir


def test_learning_rate_warms_up_then_decays_to_the_floor() -> None:
    def lr(step: int) -> float:
        return warmup_cosine_lr(step, steps=100, peak=1e-3, warmup_steps=10, min_lr_ratio=0.1)

    assert lr(0) == pytest.approx(1e-4)
    assert lr(9) == pytest.approx(1e-3)
    assert lr(10) == pytest.approx(1e-3)
    assert lr(55) == pytest.approx(0.55e-3)
    assert lr(100) == pytest.approx(1e-4)
    assert lr(150) == pytest.approx(1e-4)  # held at the floor past the end
    assert all(lr(s) >= lr(s + 1) for s in range(10, 100))


def test_no_warm_up_starts_at_the_peak() -> None:
    assert warmup_cosine_lr(0, steps=10, peak=2e-3, warmup_steps=0, min_lr_ratio=0.0) == 2e-3


def test_adamw_decays_matrices_only_and_skips_frozen_parameters() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    model[2].weight.requires_grad_(False)
    optimizer = adamw(model, lr=1e-3, weight_decay=0.1)
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert [tuple(p.shape) for p in decayed["params"]] == [(3, 4)]
    assert sorted(tuple(p.shape) for p in plain["params"]) == [(2,), (3,), (3,), (3,)]
    assert optimizer.defaults["betas"] == (0.9, 0.95)
    set_lr(optimizer, 5e-4)
    assert [g["lr"] for g in optimizer.param_groups] == [5e-4, 5e-4]


@pytest.fixture(scope="module")
def init_dir() -> Path:
    return ensure_demo_model(cache_dir())


def test_a_checkpoint_loads_in_float32_for_evaluation(init_dir: Path) -> None:
    model = load_float32(init_dir)
    assert not model.training
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    model.train()
    windows = torch.randint(
        0, model.config.vocab_size, (3, 9), generator=torch.Generator().manual_seed(0)
    )
    loss = held_out_loss(model, windows, batch_size=2)
    assert model.training  # the caller's mode is left as it was
    # A random init is about as unsure as a uniform guess over the vocabulary.
    assert 0.5 * math.log(model.config.vocab_size) < loss < 2 * math.log(model.config.vocab_size)
