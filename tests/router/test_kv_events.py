"""vLLM KV cache events: decoded from vLLM's own encoding and applied to a prefix index."""

from __future__ import annotations

import msgspec
import pytest

from router.block_hash import BlockHasher, block_key
from router.cache_aware import PrefixIndex
from router.kv_events import (
    AllBlocksCleared,
    BlocksRemoved,
    BlocksStored,
    KvEventDecodeError,
    apply_events,
    decode_batch,
    decode_seq,
)
from tests.kv_event_helpers import encode, kv, removed, stored


def test_decodes_what_vllm_encodes() -> None:
    payload = encode(
        stored([11, 12], None), stored([13], 12), removed([11]), kv.AllBlocksCleared(), ts=12.5
    )
    batch = decode_batch(payload)
    assert batch.ts == 12.5
    assert batch.events == (
        BlocksStored((11, 12), None, "GPU"),
        BlocksStored((13,), 12, "GPU"),
        BlocksRemoved((11,), "GPU"),
        AllBlocksCleared(),
    )


def test_byte_hashes_become_the_same_keys_as_our_hasher() -> None:
    digests = BlockHasher(32).block_hashes(list(range(64)))
    batch = decode_batch(encode(stored(list(digests))))
    assert batch.events == (BlocksStored(tuple(block_key(d) for d in digests), None, "GPU"),)
    assert batch.events[0].keys == tuple(BlockHasher(32).block_keys(list(range(64))))  # type: ignore[union-attr]


def test_sequence_frame() -> None:
    assert decode_seq((7).to_bytes(8, "big")) == 7
    assert decode_seq((-1).to_bytes(8, "big", signed=True)) == -1


@pytest.mark.parametrize("payload", [b"\xc1", msgspec.msgpack.encode({"a": 1}), b""])
def test_garbage_is_refused(payload: bytes) -> None:
    with pytest.raises(KvEventDecodeError):
        decode_batch(payload)


def test_unknown_event_types_are_skipped() -> None:
    payload = msgspec.msgpack.encode([1.0, [{"type": "SomethingNew", "x": 1}], 0])
    assert decode_batch(payload).events == ()


def test_apply_to_an_index_only_device_blocks() -> None:
    index = PrefixIndex(100, 100)
    events = decode_batch(
        encode(stored([1, 2, 3]), stored([4], 3, medium="CPU"), removed([3]), removed([2], "CPU"))
    ).events
    assert apply_events(index, 0, events, now=0.0) == 2
    assert [index.owners(k) for k in (1, 2, 3, 4)] == [1, 1, 0, 0]
    apply_events(index, 0, [AllBlocksCleared()], now=0.0)
    assert index.entries(0) == 0 and index.owners(1) == 0
