"""The prefix index behind KV-cache-aware replica choice (``router/cache_aware.py``): block key
-> bit mask of the replicas holding it, one bounded LRU of block keys per replica, and the walk
that finds every replica's longest cached prefix of a prompt in one pass.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from itertools import repeat

# Measured with tracemalloc (tests/router/test_cache_aware.py checks it): LRU entry, owner-map
# entry and the int key, per indexed block.
INDEX_BYTES_PER_BLOCK = 200


class PrefixIndex:
    """Block key -> replicas holding it, with one bounded LRU per replica slot.

    A slot is a small integer naming a replica (bit ``1 << slot`` in the owner masks). With
    ``ttl_s`` set, entries expire that long after they were last added (see :meth:`expire`).
    """

    def __init__(self, default_capacity: int, max_capacity: int, ttl_s: float | None = None):
        self.default_capacity = min(default_capacity, max_capacity)
        self.max_capacity = max_capacity
        self.ttl_s = ttl_s
        self._owners: dict[int, int] = {}
        self._lru: list[OrderedDict[int, float]] = []
        self._capacity: list[int] = []

    def _slot(self, slot: int) -> OrderedDict[int, float]:
        while len(self._lru) <= slot:
            self._lru.append(OrderedDict())
            self._capacity.append(self.default_capacity)
        return self._lru[slot]

    def set_capacity(self, slot: int, blocks: int) -> None:
        self._slot(slot)
        self._capacity[slot] = max(1, min(blocks, self.max_capacity))
        self._evict(slot)

    def capacity(self, slot: int) -> int:
        self._slot(slot)
        return self._capacity[slot]

    def entries(self, slot: int) -> int:
        return len(self._slot(slot))

    def total_entries(self) -> int:
        return sum(len(lru) for lru in self._lru)

    def _drop_owner(self, key: int, bit: int) -> None:
        mask = self._owners.get(key, 0) & ~bit
        if mask:
            self._owners[key] = mask
        else:
            self._owners.pop(key, None)

    def _evict(self, slot: int) -> None:
        lru = self._lru[slot]
        bit = 1 << slot
        for _ in range(len(lru) - self._capacity[slot]):
            key, _ = lru.popitem(last=False)
            self._drop_owner(key, bit)

    def add_blocks(self, slot: int, keys: Sequence[int], now: float, present: int = 0) -> None:
        """Record ``keys`` (prefix order) on ``slot``; the first key ends up most recent.

        ``present``: how many leading keys the caller knows ``slot`` already holds (their
        refresh then runs at C speed).
        """
        lru = self._slot(slot)
        bit = 1 << slot
        stamp = now + self.ttl_s if self.ttl_s is not None else 0.0
        owners = self._owners
        for key in reversed(keys[present:]):
            if key in lru:
                lru.move_to_end(key)
                lru[key] = stamp
            else:
                lru[key] = stamp
                owners[key] = owners.get(key, 0) | bit
        if present:
            head = keys[present - 1 :: -1] if present < len(keys) else keys[::-1]
            deque(map(lru.move_to_end, head), maxlen=0)
            if self.ttl_s is not None:
                lru.update(zip(head, repeat(stamp)))
        if len(lru) > self._capacity[slot]:
            self._evict(slot)

    def remove_blocks(self, slot: int, keys: Iterable[int]) -> None:
        lru = self._slot(slot)
        bit = 1 << slot
        for key in keys:
            if lru.pop(key, None) is not None:
                self._drop_owner(key, bit)

    def clear_slot(self, slot: int) -> None:
        lru = self._slot(slot)
        bit = 1 << slot
        for key in lru:
            self._drop_owner(key, bit)
        lru.clear()

    def expire(self, now: float) -> None:
        """Drop entries whose TTL has passed (no-op without ``ttl_s``)."""
        if self.ttl_s is None:
            return
        for slot, lru in enumerate(self._lru):
            bit = 1 << slot
            while lru:
                key, stamp = next(iter(lru.items()))
                if stamp > now:
                    break
                del lru[key]
                self._drop_owner(key, bit)

    def owners(self, key: int) -> int:
        return self._owners.get(key, 0)


def match_lengths(
    keys: Sequence[int], candidates: int, indexes: Sequence[PrefixIndex]
) -> dict[int, int]:
    """Leading blocks of ``keys`` held by each slot in the ``candidates`` mask (only slots with
    at least one block appear). A block counts if any of ``indexes`` holds it."""
    matched: dict[int, int] = {}
    alive = candidates
    owner_maps = [ix._owners for ix in indexes]
    single = owner_maps[0] if len(owner_maps) == 1 else None
    for depth, key in enumerate(keys):
        if single is not None:
            here = single.get(key, 0) & alive
        else:
            here = 0
            for om in owner_maps:
                here |= om.get(key, 0)
            here &= alive
        dropped = alive & ~here
        while dropped and depth:
            low = dropped & -dropped
            matched[low.bit_length() - 1] = depth
            dropped ^= low
        alive = here
        if not alive:
            return matched
    depth = len(keys)
    while alive and depth:
        low = alive & -alive
        matched[low.bit_length() - 1] = depth
        alive ^= low
    return matched
