"""The prefix indexes behind KV-cache-aware replica choice (``router/cache_aware.py``): block
key -> bit mask of the replicas holding it, one bounded LRU of block keys per replica, and the
walk that finds every replica's longest cached prefix of a prompt.

Two implementations of one LRU: :class:`PrefixIndex` (an ordered dict per replica; what KV
events fill, block by block) and :class:`PromptIndex` (a tree of chained blocks per replica,
stored as runs of blocks used together; what routing fills, whole prompts at a time). Both
evict the least recently used block first, deepest first among blocks used together (vLLM
frees a request's blocks tail first).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence, Sized
from itertools import accumulate, compress, filterfalse, islice, repeat
from operator import and_, not_, or_

# Memory per indexed block once the index has filled and evicted (its dicts then keep room for
# more entries than they hold), prompts of 100 new blocks: owner-map entry and the int key,
# plus an LRU entry (PrefixIndex) or a tuple slot in a run (PromptIndex). Measured with
# tracemalloc (tests/router/test_prefix_index.py checks them): about 320 and 150 bytes; a dict
# being rebuilt briefly holds its old table too (about 430 bytes a block at that moment). A
# PromptIndex run costs about 270 bytes on its own (node, tuple, first-key entry, tick), so
# where prompts branch off every block or two it holds up to about 420 bytes a block.
INDEX_BYTES_PER_BLOCK = 340
PROMPT_INDEX_BYTES_PER_BLOCK = 170


class _SlotIndex:
    """What both indexes share: per-replica capacities, the owner masks, their accessors."""

    prefix_closed = False

    def __init__(self, default_capacity: int, max_capacity: int, ttl_s: float | None = None):
        self.default_capacity = min(default_capacity, max_capacity)
        self.max_capacity = max_capacity
        self.ttl_s = ttl_s
        self._owners: dict[int, int] = {}
        self._capacity: list[int] = []
        # At most the smallest expiry stamp still held (stamps are added in clock order):
        # before it, expire() has nothing to do.
        self._next_expiry = float("inf")

    def _slot(self, slot: int) -> Sized:
        """The slot's own store (created on first use, with the default capacity)."""
        raise NotImplementedError

    def _evict(self, slot: int) -> None:
        """Evict least recently used blocks of ``slot`` down to its capacity."""
        raise NotImplementedError

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
        return sum(self.entries(slot) for slot in range(len(self._capacity)))

    def owners(self, key: int) -> int:
        return self._owners.get(key, 0)

    def _drop_owners(self, keys: list[int], bit: int) -> None:
        """Clear ``bit`` in the owner masks of ``keys``, dropping masks that become empty."""
        owners = self._owners
        masks = list(map((~bit).__and__, map(owners.get, keys, repeat(0))))
        owners.update(compress(zip(keys, masks, strict=True), masks))
        deque(map(owners.pop, compress(keys, map(not_, masks)), repeat(None)), maxlen=0)


class PrefixIndex(_SlotIndex):
    """Block key -> replicas holding it, with one bounded LRU per replica slot.

    A slot is a small integer naming a replica (bit ``1 << slot`` in the owner masks). With
    ``ttl_s`` set, entries expire that long after they were last added (see :meth:`expire`).

    This is the index KV events fill (precise mode): blocks stored and removed one by one.
    Routed prompts go to a :class:`PromptIndex`, which keeps the same LRU order for less work.

    Every per-key step (insert, refresh, evict, owner-mask update) runs as a C-level ``map`` /
    ``update`` over the request's keys: a decision touches up to a few hundred keys, and a
    Python loop over them would be most of its cost.
    """

    # Blocks arrive from any depth and leave in any order (KV events): not prefix-closed.
    prefix_closed = False

    def __init__(self, default_capacity: int, max_capacity: int, ttl_s: float | None = None):
        super().__init__(default_capacity, max_capacity, ttl_s)
        self._lru: list[OrderedDict[int, float]] = []

    def _slot(self, slot: int) -> OrderedDict[int, float]:
        while len(self._lru) <= slot:
            self._lru.append(OrderedDict())
            self._capacity.append(self.default_capacity)
        return self._lru[slot]

    def _evict(self, slot: int) -> None:
        lru = self._lru[slot]
        excess = len(lru) - self._capacity[slot]
        if excess > 0:
            victims = list(islice(lru, excess))
            deque(map(lru.__delitem__, victims), maxlen=0)
            self._drop_owners(victims, 1 << slot)

    def add_blocks(self, slot: int, keys: Sequence[int], now: float, present: int = 0) -> None:
        """Record ``keys`` (prefix order) on ``slot``; the first key ends up most recent.

        The LRU ends as if each key, deepest first, were moved to (or inserted at) its most
        recent end. ``present``: how many leading keys the caller knows ``slot`` already holds
        (they are only refreshed).
        """
        lru = self._slot(slot)
        stamp = now + self.ttl_s if self.ttl_s is not None else 0.0
        self._next_expiry = min(self._next_expiry, stamp)
        if present < len(keys):
            tail = keys[present:][::-1]
            new = list(filterfalse(lru.__contains__, tail))
            held = len(lru)
            lru.update(zip(tail, repeat(stamp)))
            if len(lru) - held < len(tail):  # not all new and distinct: move them in order
                deque(map(lru.move_to_end, tail), maxlen=0)
            if new:
                owners = self._owners
                bits = map((1 << slot).__or__, map(owners.get, new, repeat(0)))
                owners.update(zip(new, bits, strict=True))
        if present:
            head = keys[present - 1 :: -1] if present < len(keys) else keys[::-1]
            deque(map(lru.move_to_end, head), maxlen=0)
            if self.ttl_s is not None:
                lru.update(zip(head, repeat(stamp)))
        if len(lru) > self._capacity[slot]:
            self._evict(slot)

    def remove_blocks(self, slot: int, keys: Iterable[int]) -> None:
        lru = self._slot(slot)
        held = [key for key in keys if lru.pop(key, None) is not None]
        if held:
            self._drop_owners(held, 1 << slot)

    def clear_slot(self, slot: int) -> None:
        lru = self._slot(slot)
        self._drop_owners(list(lru), 1 << slot)
        lru.clear()

    def expire(self, now: float) -> None:
        """Drop entries whose TTL has passed (no-op without ``ttl_s``)."""
        if self.ttl_s is None or now < self._next_expiry:
            return
        next_expiry = float("inf")
        for slot, lru in enumerate(self._lru):
            expired: list[int] = []
            for key, stamp in lru.items():
                if stamp > now:
                    next_expiry = min(next_expiry, stamp)
                    break
                expired.append(key)
            if expired:
                deque(map(lru.__delitem__, expired), maxlen=0)
                self._drop_owners(expired, 1 << slot)
        self._next_expiry = next_expiry


def match_lengths(
    keys: Sequence[int], candidates: int, indexes: Sequence[_SlotIndex]
) -> dict[int, int]:
    """Leading blocks of ``keys`` held by each slot in the ``candidates`` mask (only slots with
    at least one block appear, in the order their match ends, lowest slot first within a
    depth). A block counts if any of ``indexes`` holds it.

    The slots still matching after depth ``d`` are the AND of the owner masks of blocks 0..d.
    When every index is prefix-closed (a :class:`PromptIndex`), that AND is the
    owner mask of block ``d`` alone and shrinks with ``d``: each point where it shrinks is
    found by bisection, a few dozen lookups for any prompt. Otherwise one C-level pass
    AND-accumulates every block's mask and maps each distinct mask to the last depth it holds.
    """
    if not keys:
        return {}
    owner_maps = [ix._owners for ix in indexes]
    if all(ix.prefix_closed for ix in indexes):
        return _match_closed(keys, candidates, owner_maps)
    first, *rest = owner_maps
    masks: Iterable[int] = map(first.get, keys, repeat(0))
    for owners in rest:
        masks = map(or_, masks, map(owners.get, keys, repeat(0)))
    alive = accumulate(masks, and_, initial=candidates)
    return _ends(iter(dict(zip(alive, range(len(keys) + 1), strict=True)).items()))


def _ends(levels: Iterator[tuple[int, int]]) -> dict[int, int]:
    """Match lengths from (alive mask, last depth it holds) pairs, in depth order."""
    matched: dict[int, int] = {}
    mask, depth = next(levels, (0, 0))
    for next_mask, next_depth in (*levels, (0, 0)):
        dropped = mask & ~next_mask
        while dropped and depth:
            low = dropped & -dropped
            matched[low.bit_length() - 1] = depth
            dropped ^= low
        mask, depth = next_mask, next_depth
    return matched


def _match_closed(
    keys: Sequence[int], candidates: int, owner_maps: list[dict[int, int]]
) -> dict[int, int]:
    if len(owner_maps) == 1:
        get = owner_maps[0].get

        def alive(depth: int) -> int:  # slots holding keys[: depth + 1]
            return get(keys[depth], 0) & candidates
    else:

        def alive(depth: int) -> int:
            here = 0
            for owners in owner_maps:
                here |= owners.get(keys[depth], 0)
            return here & candidates

    levels = [(candidates, 0)]
    n = len(keys)
    start, mask = 0, alive(0)
    while mask:
        # The last depth at which exactly `mask` still matches: alive() is `mask` at `start`
        # and a strict subset of it past the answer.
        lo, hi = start, n - 1
        if alive(hi) != mask:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if alive(mid) == mask:
                    lo = mid
                else:
                    hi = mid
            hi = lo
        levels.append((mask, hi + 1))
        start = hi + 1
        mask = alive(start) if start < n else 0
    return _ends(iter(levels))
