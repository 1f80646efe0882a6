"""Where a training process loads its models (issue 46, items 3 and 5): the engine's variables
decide the dtype, the device and whether this rank reads the weights at all; a ZeRO-3 model is
gathered on every rank and saved by the main one with the partitioned init off."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers.integrations import deepspeed as hf_deepspeed

from rl_loop.config import EngineConfig, LoopConfig, LoraConfig
from rl_loop.train import load_for_training
from rl_loop.trainers.placement import (
    Placement,
    gathered_model,
    load_model,
    parameter_digests,
    placement_from_env,
    zero3_init_off,
)
from serving.training import load_float32

FSDP_EFFICIENT = {"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}


def test_without_an_engine_every_rank_reads_and_only_frozen_models_drop_to_bf16() -> None:
    place = placement_from_env("cuda:1", bf16=True, environ={})
    assert (place.sharding, place.reads_weights) == ("none", True)
    assert place.dtype(trained_in_full=True) == torch.float32  # DDP: its own master weights
    assert place.dtype(trained_in_full=False) == torch.bfloat16  # reference, LoRA base
    cpu = placement_from_env("cpu", bf16=False, environ={})
    assert cpu.dtype(trained_in_full=False) == torch.float32


@pytest.mark.parametrize(
    ("extra", "reads"),
    [
        ({"LOCAL_RANK": "0"}, True),
        ({"LOCAL_RANK": "3"}, False),
        ({"LOCAL_RANK": "3", "FSDP_CPU_RAM_EFFICIENT_LOADING": "false"}, True),
    ],
)
def test_under_fsdp_only_local_rank_0_reads_when_loading_is_cpu_ram_efficient(
    extra: dict[str, str], reads: bool
) -> None:
    place = placement_from_env("cuda:3", bf16=True, environ={**FSDP_EFFICIENT, **extra})
    assert (place.sharding, place.reads_weights) == ("fsdp", reads)
    assert place.dtype(trained_in_full=True) == torch.bfloat16  # FSDP2 upcasts its shards


def test_under_deepspeed_every_rank_reads_partitioned_in_bf16() -> None:
    place = placement_from_env("cuda:0", bf16=True, environ={"ACCELERATE_USE_DEEPSPEED": "true"})
    assert (place.sharding, place.reads_weights) == ("deepspeed", True)
    assert place.dtype(trained_in_full=True) == torch.bfloat16


def test_a_rank_that_does_not_read_holds_a_meta_skeleton_with_real_buffers(
    micro_model: Path,
) -> None:
    skeleton = load_model(
        micro_model, Placement("fsdp", "cuda:1", True, reads_weights=False), trained_in_full=True
    )
    assert {p.device.type for p in skeleton.parameters()} == {"meta"}
    assert {p.dtype for p in skeleton.parameters()} == {torch.bfloat16}
    plain = load_float32(micro_model)
    for (name, buffer), (_, expected) in zip(
        skeleton.named_buffers(), plain.named_buffers(), strict=True
    ):
        assert buffer.device.type == "cpu", name
        assert torch.equal(buffer, expected), name


def test_a_sharded_rank_that_reads_keeps_bf16_weights_on_the_cpu(micro_model: Path) -> None:
    model = load_model(
        micro_model, Placement("fsdp", "cuda:0", True, reads_weights=True), trained_in_full=True
    )
    assert {p.device.type for p in model.parameters()} == {"cpu"}  # fully_shard places shards
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    plain = load_float32(micro_model)
    for (name, p), (_, q) in zip(model.named_parameters(), plain.named_parameters(), strict=True):
        assert torch.equal(p, q.to(torch.bfloat16)), name


def test_the_job_loads_through_the_engine_variables(
    micro_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``accelerate launch`` with fsdp2-moe.yaml gives rank 1: a skeleton, never zeros."""
    for key, value in {**FSDP_EFFICIENT, "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    config = LoopConfig(work_dir=tmp_path, engine=EngineConfig(bf16=True))
    assert {
        p.device.type
        for p in load_for_training(micro_model, config, frozen=True).model.parameters()
    } == {"meta"}
    monkeypatch.setenv("LOCAL_RANK", "0")
    lora = config.model_copy(update={"engine": EngineConfig(bf16=True, lora=LoraConfig())})
    base = load_for_training(micro_model, lora, frozen=False)
    assert {p.dtype for p in base.model.parameters()} == {torch.bfloat16}


class _Zero3Config:
    def is_zero3(self) -> bool:
        return True


def test_zero3_init_off_hides_the_trainers_config_and_restores_it() -> None:
    config = _Zero3Config()
    hf: Any = hf_deepspeed  # untyped module
    hf.set_hf_deepspeed_config(config)
    try:
        assert hf.is_deepspeed_zero3_enabled()
        with zero3_init_off():
            assert not hf.is_deepspeed_zero3_enabled()
        assert hf.is_deepspeed_zero3_enabled()
    finally:
        hf.unset_hf_deepspeed_config()


@pytest.fixture
def fake_deepspeed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A ``deepspeed`` whose ``GatheredParameters`` records each gather (what every rank must
    enter, in the same order)."""
    entered: list[str] = []

    @contextmanager
    def gathered(params: list[torch.nn.Parameter], modifier_rank: int | None) -> Iterator[None]:
        assert modifier_rank is None
        entered.extend(str(p.ds_id) for p in params)  # type: ignore[attr-defined]
        yield

    module = types.SimpleNamespace(zero=types.SimpleNamespace(GatheredParameters=gathered))
    monkeypatch.setitem(sys.modules, "deepspeed", module)
    return entered


@pytest.mark.parametrize("is_main", [True, False])
def test_a_partitioned_model_is_gathered_on_every_rank_and_kept_by_the_main_one(
    micro_model: Path, fake_deepspeed: list[str], is_main: bool
) -> None:
    model = load_float32(micro_model)
    for i, p in enumerate(model.parameters()):
        p.ds_id = i  # type: ignore[attr-defined]  # what zero.Init marks
    whole = gathered_model(model, is_main)
    assert fake_deepspeed == [str(i) for i in range(len(list(model.parameters())))]
    if not is_main:
        assert whole is None
        return
    assert whole is not None and whole is not model
    assert not any(hasattr(p, "ds_id") for p in whole.parameters())
    assert parameter_digests(whole) == parameter_digests(model)


def test_a_model_that_is_not_partitioned_is_saved_as_it_is(micro_model: Path) -> None:
    model = load_float32(micro_model)
    assert gathered_model(model, is_main=True) is model
    assert gathered_model(model, is_main=False) is None
