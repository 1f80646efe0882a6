"""vLLM KV cache events: decoding and application to a prefix index. Pure (no sockets).

Wire format (vLLM 0.32, ``vllm/distributed/kv_events.py``): the ZMQ publisher sends multipart
messages ``(topic, seq, payload)``; ``seq`` is an 8-byte big-endian counter (a gap means lost
messages), ``payload`` is msgpack of a ``KVEventBatch``: an array ``[ts, events,
data_parallel_rank]``. Each event is a map tagged by ``"type"``:

- ``BlockStored``: ``block_hashes`` (blocks now cached, in prefix order; 64-bit ints by default,
  32-byte digests when ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0``), ``parent_block_hash``,
  ``token_ids``, ``block_size``, ``medium`` ("GPU" for the device cache, "CPU"/"STORAGE" for
  offload tiers), plus optional fields we ignore.
- ``BlockRemoved``: ``block_hashes`` evicted, ``medium``.
- ``AllBlocksCleared``: the whole cache was reset (``/reset_prefix_cache``).

Only device-cache events (medium "GPU" or absent) are applied: an offloaded block still needs a
copy back, so it is not a free prefill. Unknown event types are skipped, so a newer vLLM that adds
events does not break the gateway.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from router.block_hash import block_key

DEVICE_MEDIUMS = frozenset({"GPU", None})


class KvEventDecodeError(ValueError):
    """A payload that is not a vLLM KV event batch."""


@dataclass(frozen=True, slots=True)
class BlocksStored:
    keys: tuple[int, ...]
    parent_key: int | None
    medium: str | None


@dataclass(frozen=True, slots=True)
class BlocksRemoved:
    keys: tuple[int, ...]
    medium: str | None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KvEvent = BlocksStored | BlocksRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class KvEventBatch:
    ts: float
    events: tuple[KvEvent, ...]
    data_parallel_rank: int | None = None


def _keys(raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, list):
        raise KvEventDecodeError(f"block_hashes is {type(raw).__name__}, not a list")
    out: list[int] = []
    for h in raw:
        if not isinstance(h, int | bytes):
            raise KvEventDecodeError(f"a block hash is {type(h).__name__}")
        out.append(block_key(h))
    return tuple(out)


def _event(raw: Any) -> KvEvent | None:
    if not isinstance(raw, dict):
        raise KvEventDecodeError(f"an event is {type(raw).__name__}, not a map")
    kind = raw.get("type")
    medium = raw.get("medium")
    if kind == "BlockStored":
        parent = raw.get("parent_block_hash")
        return BlocksStored(
            _keys(raw.get("block_hashes")),
            None if parent is None else block_key(parent),
            medium,
        )
    if kind == "BlockRemoved":
        return BlocksRemoved(_keys(raw.get("block_hashes")), medium)
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    return None


def decode_batch(payload: bytes) -> KvEventBatch:
    """Decode one msgpack payload; raises :class:`KvEventDecodeError` on anything else."""
    try:
        raw = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise KvEventDecodeError(f"not msgpack: {exc}") from exc
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
        raise KvEventDecodeError("a KV event batch is [ts, events, dp_rank]")
    events = tuple(e for e in (_event(x) for x in raw[1]) if e is not None)
    rank = raw[2] if len(raw) > 2 and isinstance(raw[2], int) else None
    return KvEventBatch(float(raw[0]), events, rank)


def decode_seq(seq: bytes) -> int:
    """The publisher's sequence number frame (8 bytes, big endian, signed)."""
    return int.from_bytes(seq, "big", signed=True)


class BlockSink(Protocol):
    """What events are applied to: one replica's view of its cached blocks."""

    def add_blocks(self, slot: int, keys: Sequence[int], now: float) -> None: ...

    def remove_blocks(self, slot: int, keys: Iterable[int]) -> None: ...

    def clear_slot(self, slot: int) -> None: ...


def apply_events(sink: BlockSink, slot: int, events: Iterable[KvEvent], now: float) -> int:
    """Apply device-cache events to ``slot`` of ``sink``; returns how many were applied."""
    applied = 0
    for event in events:
        if isinstance(event, BlocksStored):
            if event.medium in DEVICE_MEDIUMS:
                sink.add_blocks(slot, event.keys, now)
                applied += 1
        elif isinstance(event, BlocksRemoved):
            if event.medium in DEVICE_MEDIUMS:
                sink.remove_blocks(slot, event.keys)
                applied += 1
        else:
            sink.clear_slot(slot)
            applied += 1
    return applied
