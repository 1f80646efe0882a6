"""A micro Qwen3-MoE (one layer, hidden 32) with the project's tokenizer: real model code, fast
enough for optimizer steps in unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from serving.build import build_model, ensure_tokenizer
from serving.model_config import ModelSpec
from serving.tokenizer import TokenizerSpec
from tests.fixtures.vllm_fixture import cache_dir
from traffic.store import StoreBackend, StoreConfig, open_store

MICRO = ModelSpec(
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    intermediate_size=64,
    max_position_embeddings=1024,
    dtype="float32",
)


@pytest.fixture(scope="session")
def micro_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    models = cache_dir() / "models"
    tokenizer = ensure_tokenizer(models, TokenizerSpec(vocab_size=MICRO.vocab_size))
    return build_model(MICRO, tokenizer, tmp_path_factory.mktemp("micro"), seed=3)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[StoreBackend]:
    """An embedded SQLite traffic record, connected."""
    backend = open_store(StoreConfig(url=f"sqlite:///{tmp_path / 'store.db'}"))
    await backend.connect()
    try:
        yield backend
    finally:
        await backend.close()
