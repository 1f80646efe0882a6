"""vLLM KV cache events built with vLLM's own classes (``vllm.distributed.kv_events``), shared by
the tests of our decoder (``tests/router/test_kv_events.py``) and of the subscriber against
vLLM's publisher (``tests/gateway/test_kv_event_replay.py``). Importing this module skips the
importing test module when vLLM is not installed."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

kv = pytest.importorskip("vllm.distributed.kv_events", reason="vllm is not installed")

BLOCK_SIZE = 32


def stored(
    hashes: list[int | bytes], parent: int | bytes | None = None, medium: str = "GPU"
) -> Any:
    """A ``BlockStored`` event for ``hashes`` (block ids, as vLLM publishes them)."""
    return kv.BlockStored(
        block_hashes=hashes,
        parent_block_hash=parent,
        token_ids=list(range(BLOCK_SIZE * len(hashes))),
        block_size=BLOCK_SIZE,
        lora_id=None,
        medium=medium,
        lora_name=None,
    )


def removed(hashes: list[int | bytes], medium: str = "GPU") -> Any:
    """A ``BlockRemoved`` event."""
    return kv.BlockRemoved(block_hashes=hashes, medium=medium)


def batch(*events: Any, ts: float = 1.0) -> Any:
    """A ``KVEventBatch`` of ``events``."""
    return kv.KVEventBatch(ts=ts, events=list(events))


def encode(*events: Any, ts: float = 1.0) -> bytes:
    """The msgpack payload vLLM's publisher sends for a batch of ``events``."""
    return msgspec.msgpack.Encoder().encode(batch(*events, ts=ts))
