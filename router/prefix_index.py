"""The prefix indexes behind KV-cache-aware replica choice (``router/cache_aware.py``): block
key -> bit mask of the replicas holding it, one bounded LRU of block keys per replica, and the
walk that finds every replica's longest cached prefix of a prompt.

Two implementations of one LRU: :class:`PrefixIndex` (an ordered dict per replica; what KV
events fill, block by block) and :class:`PromptIndex` (a tree of chained blocks per replica;
what routing fills, whole prompts at a time). Both evict the least recently used block first,
deepest first among blocks used together (vLLM frees a request's blocks tail first).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence, Sized
from itertools import accumulate, compress, filterfalse, islice, repeat
from operator import and_, not_, or_

# Memory per indexed block once the index has filled and evicted (its dicts then keep room for
# more entries than they hold): LRU entry, owner-map entry and the int key; a PromptIndex holds
# a tree node and a leaf-heap share instead of the LRU entry. Measured with tracemalloc
# (tests/router/test_prefix_index.py checks them): about 320 and 330 bytes; a dict being
# rebuilt briefly holds its old table too (about 430 bytes a block at that moment).
INDEX_BYTES_PER_BLOCK = 340
PROMPT_INDEX_BYTES_PER_BLOCK = 340


class _SlotIndex:
    """What both indexes share: per-replica capacities, the owner masks, their accessors."""

    prefix_closed = False
    bytes_per_block = INDEX_BYTES_PER_BLOCK

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
    Python loop over them used to be most of its cost.
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


class _Block:
    """A block held by one replica in a :class:`PromptIndex`: its place in the prompt tree and
    the last time a prompt through it was added (kept exact for leaves only)."""

    __slots__ = ("children", "depth", "key", "parent", "stamp", "tick")

    def __init__(self, key: int, parent: _Block | None, depth: int, tick: int, stamp: float):
        self.key = key
        self.parent = parent
        self.depth = depth
        self.children = 0
        self.tick = tick
        self.stamp = stamp


class PromptIndex(_SlotIndex):
    """:class:`PrefixIndex`'s LRU for blocks that only ever arrive as whole prompts (chained keys
    from block 0) and leave only by eviction, expiry or :meth:`clear_slot`: what routing
    records. Adding a prompt costs O(new blocks + log prompt), not O(prompt).

    Why it is the same LRU. Each replica's blocks form a tree (a chained key names its whole
    prefix, so a block's parent is the block before it). Adding a prompt uses every block on
    its path, deepest first, so a block is never less recent than a block below it: the least
    recently used block is always a leaf, and among leaves the order is (last use, deeper
    first). Only the deepest block of an added prompt records the use (``tick``); a leaf's
    ``tick`` is exact because an evicted block hands its ``tick`` up to its parent. Leaves sit
    in a heap per replica (stale entries are skipped, and dropped when the heap doubles).

    Every replica's blocks are *prefix-closed*: with a block, a replica holds every block before
    it, so :func:`match_lengths` bisects. ``ttl_s`` stamps follow use order when the clock is
    monotonic (as the selector's is), so expiry pops the same leaves.
    """

    prefix_closed = True
    bytes_per_block = PROMPT_INDEX_BYTES_PER_BLOCK

    def __init__(self, default_capacity: int, max_capacity: int, ttl_s: float | None = None):
        super().__init__(default_capacity, max_capacity, ttl_s)
        self._blocks: list[dict[int, _Block]] = []
        self._leaves: list[list[tuple[int, int, int]]] = []  # (tick, -depth, key) per slot
        self._tick = 0

    def _slot(self, slot: int) -> dict[int, _Block]:
        while len(self._blocks) <= slot:
            self._blocks.append({})
            self._leaves.append([])
            self._capacity.append(self.default_capacity)
        return self._blocks[slot]

    def _held(self, blocks: dict[int, _Block], keys: Sequence[int], present: int) -> int:
        """How many leading ``keys`` the slot holds (``present``: a lower bound, if right)."""
        lo, hi = 0, len(keys)  # keys[:lo] held; keys[:hi + 1] not (when hi < len)
        if 0 < present <= hi and keys[present - 1] in blocks:
            lo = present
        if lo == hi or keys[lo] not in blocks:
            return lo
        lo += 1
        if lo < hi and keys[hi - 1] in blocks:
            return hi
        while lo < hi:  # prefix closure: `keys[i] in blocks` holds for i < answer only
            mid = (lo + hi) // 2
            if keys[mid] in blocks:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def add_blocks(self, slot: int, keys: Sequence[int], now: float, present: int = 0) -> None:
        """Record a whole prompt's ``keys`` on ``slot`` (see :meth:`PrefixIndex.add_blocks`)."""
        if not keys:
            return
        blocks = self._slot(slot)
        self._tick += 1
        tick = self._tick
        stamp = now + self.ttl_s if self.ttl_s is not None else 0.0
        self._next_expiry = min(self._next_expiry, stamp)
        held = self._held(blocks, keys, present)
        parent = blocks[keys[held - 1]] if held else None
        if held < len(keys):
            bit = 1 << slot
            owners = self._owners
            for depth in range(held, len(keys)):
                key = keys[depth]
                block = _Block(key, parent, depth, tick, stamp)
                if parent is not None:
                    parent.children += 1
                blocks[key] = parent = block
                owners[key] = owners.get(key, 0) | bit
        assert parent is not None
        parent.tick, parent.stamp = tick, stamp
        if not parent.children:
            heap = self._leaves[slot]
            heapq.heappush(heap, (tick, -parent.depth, parent.key))
            if len(heap) > 2 * len(blocks) + 64:
                self._rebuild_leaves(slot)
        if len(blocks) > self._capacity[slot]:
            self._evict(slot)

    def _rebuild_leaves(self, slot: int) -> None:
        heap = [(b.tick, -b.depth, b.key) for b in self._blocks[slot].values() if not b.children]
        heapq.heapify(heap)
        self._leaves[slot] = heap

    def _oldest_leaf(self, slot: int) -> _Block | None:
        """The least recently used block of ``slot`` (its heap's stale entries dropped)."""
        heap, blocks = self._leaves[slot], self._blocks[slot]
        while heap:
            tick, _, key = heap[0]
            block = blocks.get(key)
            if block is not None and not block.children and block.tick == tick:
                return block
            heapq.heappop(heap)
        return None

    def _drop(self, slot: int, block: _Block) -> None:
        """Evict leaf ``block`` (the heap's top): its parent inherits its last use."""
        heapq.heappop(self._leaves[slot])
        del self._blocks[slot][block.key]
        mask = self._owners.get(block.key, 0) & ~(1 << slot)
        if mask:
            self._owners[block.key] = mask
        else:
            self._owners.pop(block.key, None)
        parent = block.parent
        if parent is not None:
            parent.children -= 1
            if block.tick > parent.tick:
                parent.tick, parent.stamp = block.tick, block.stamp
            if not parent.children:
                heapq.heappush(self._leaves[slot], (parent.tick, -parent.depth, parent.key))

    def _evict(self, slot: int) -> None:
        blocks, keep = self._blocks[slot], self._capacity[slot]
        while len(blocks) > keep:
            block = self._oldest_leaf(slot)
            if block is None:  # cannot happen: a non-empty tree has a leaf
                break
            self._drop(slot, block)

    def clear_slot(self, slot: int) -> None:
        self._drop_owners(list(self._slot(slot)), 1 << slot)
        self._blocks[slot] = {}
        self._leaves[slot] = []

    def expire(self, now: float) -> None:
        """Drop blocks whose TTL has passed (no-op without ``ttl_s``)."""
        if self.ttl_s is None or now < self._next_expiry:
            return
        next_expiry = float("inf")
        for slot in range(len(self._blocks)):
            while (block := self._oldest_leaf(slot)) is not None:
                if block.stamp > now:
                    next_expiry = min(next_expiry, block.stamp)
                    break
                self._drop(slot, block)
        self._next_expiry = next_expiry


def match_lengths(
    keys: Sequence[int], candidates: int, indexes: Sequence[PrefixIndex | PromptIndex]
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
