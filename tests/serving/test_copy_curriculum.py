"""The copy curriculum: windows only copying can predict, mixed into base training; the copy
probe's figures on every base checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from serving.base_checkpoints import config_identity, find_trained
from serving.build import ensure_demo_model, read_version
from serving.copy_curriculum import (
    CopySpec,
    copy_windows,
    extend_phase,
    ordinary_ids,
    train_on_copies,
    warmup_phase,
)
from serving.tokenizer import load_tokenizer
from serving.train_base import QUICK_TRAINING
from serving.train_base import train_base as run_training
from tests.fixtures.vllm_fixture import cache_dir


def _segments_come_from_the_first_half(window: list[int], spec: CopySpec) -> bool:
    """The second half can be cut into segments of min..max span, each found in the first."""
    half = len(window) // 2
    first = window[:half]

    def found(segment: list[int]) -> bool:
        n = len(segment)
        return any(first[i : i + n] == segment for i in range(half - n + 1))

    reach = {half}  # positions of the second half reachable by whole segments
    for pos in range(half, len(window)):
        if pos not in reach:
            continue
        for span in range(1, spec.max_span + 1):
            end = pos + span
            if end > len(window):
                break
            last = end == len(window)
            if (span >= spec.min_span or last) and found(window[pos:end]):
                reach.add(end)
    return len(window) in reach


def test_copy_windows_repeat_first_half_segments_and_never_draw_specials() -> None:
    spec = CopySpec(fraction=0.5, min_span=4, max_span=8)
    ids = ordinary_ids(300, special_ids=[0, 1, 2, 299])
    windows = copy_windows(6, 41, ids, spec, torch.Generator().manual_seed(3))
    assert windows.shape == (6, 41)
    assert not torch.isin(windows, torch.tensor([0, 1, 2, 299])).any()
    for row in windows.tolist():
        assert _segments_come_from_the_first_half(row, spec)
        assert len(set(row[:20])) > 15  # the first half is random, not a repeated pattern
    again = copy_windows(6, 41, ids, spec, torch.Generator().manual_seed(3))
    assert torch.equal(windows, again)


def test_copy_spec_counts_its_windows_and_refuses_inverted_spans() -> None:
    assert CopySpec().windows_per_batch(8) == 0
    assert CopySpec(fraction=0.25).windows_per_batch(8) == 2
    assert CopySpec(fraction=0.01).windows_per_batch(8) == 1
    with pytest.raises(ValueError, match="min_span"):
        CopySpec(min_span=10, max_span=4)
    with pytest.raises(ValueError, match="extend_windows"):
        CopySpec(min_span=8, extend_windows=(64, 12))
    with pytest.raises(ValueError, match="warmup_window"):
        CopySpec(min_span=20, max_span=30, warmup_steps=1, warmup_window=32)
    with pytest.raises(ValueError, match="cannot hold"):
        copy_windows(1, 10, torch.arange(5, 50), CopySpec(min_span=8), torch.Generator())


@pytest.mark.slow
def test_base_training_mixes_copy_windows_and_reports_the_copy_probe(tmp_path: Path) -> None:
    init = ensure_demo_model(cache_dir())
    copies = CopySpec(
        fraction=0.5,
        warmup_steps=2,
        warmup_batch_size=4,
        extend_windows=(24, 32),
        extend_steps=1,
        extend_tokens=64,
    )
    config = QUICK_TRAINING.model_copy(
        update={"steps": 3, "eval_every": 3, "copy_curriculum": copies}
    )
    result = run_training(init, tmp_path, config, progress=False)
    version = read_version(result.checkpoint_dir)
    assert version.eval["copy_repeat_top1"] == result.copy_top1
    assert {"copy_first_loss", "copy_repeat_loss"} <= set(version.eval)
    assert version.metadata["copy_warmup_tokens"] == 2 * 4 * copies.warmup_window
    assert isinstance(version.metadata["copy_loss_last"], float)
    assert version.metadata["copy_extend_windows"] == [24, 32]
    held_out = version.metadata["held_out_curve"]
    assert isinstance(held_out, list) and len(held_out) == 3  # init, last code step, extension
    assert find_trained(tmp_path, init, config) == result.checkpoint_dir
    assert find_trained(tmp_path, init, QUICK_TRAINING.model_copy(update={"steps": 3})) is None
    tokenizer = load_tokenizer(init)
    assert tokenizer.all_special_ids  # what copy windows must never draw


def test_a_checkpoint_saved_before_the_copy_curriculum_keeps_its_identity() -> None:
    saved_before = QUICK_TRAINING.model_dump(mode="json")
    del saved_before["copy_curriculum"]
    now = QUICK_TRAINING.model_dump(mode="json")
    assert config_identity(saved_before) == config_identity(now)
    with_copies = QUICK_TRAINING.model_copy(update={"copy_curriculum": CopySpec(fraction=0.25)})
    assert config_identity(with_copies.model_dump(mode="json")) != config_identity(now)


def test_the_phases_grow_lengths_at_constant_tokens_and_the_extension_needs_code() -> None:
    spec = CopySpec(warmup_steps=3, extend_windows=(64, 128), extend_steps=2, extend_tokens=256)
    warm = warmup_phase(spec)
    assert warm.schedule == [(32, 64)] * 3 and not warm.with_code
    assert [warm.lr(s) for s in (0, 99, 500)] == [1e-5, 1e-3, 1e-3]
    extend = extend_phase(spec)
    assert extend.schedule == [(64, 4), (64, 4), (128, 2), (128, 2)] and extend.with_code
    with pytest.raises(ValueError, match="pass `code`"):
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters())
        train_on_copies(
            model, optimizer, torch.arange(10, 99), spec, torch.Generator(), extend, grad_clip=1.0
        )
