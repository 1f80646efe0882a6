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

import heapq
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence, Sized
from itertools import accumulate, compress, count, filterfalse, islice, repeat
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


class _Run:
    """A run of a :class:`PromptIndex` tree: blocks ``keys`` (prefix order) chained without a
    branch, hanging below the last block of ``parent``, with ``children`` runs hanging below
    its own last block (-1 once it has left the tree). All its blocks were last used by the
    same prompt: ``tick`` and ``stamp`` are that use (exact while the run is a leaf, possibly
    older otherwise). Leaf runs are linked (``prev``, ``next``) in use order, except those
    waiting in the late heap (see :class:`PromptIndex`)."""

    __slots__ = ("children", "keys", "next", "parent", "prev", "stamp", "tick")

    def __init__(self, keys: tuple[int, ...], parent: _Run | None, tick: int, stamp: float):
        self.keys = keys
        self.parent = parent
        self.children = 0
        self.tick = tick
        self.stamp = stamp
        self.prev: _Run | None = None
        self.next: _Run | None = None

    def __lt__(self, other: _Run) -> bool:
        # Only stale (tick, run) heap entries can tie on their tick: either order will do.
        return False

    def unlink(self) -> None:
        """Leave the use-ordered list of leaves (if in it)."""
        prev, nxt = self.prev, self.next
        if prev is not None and nxt is not None:
            prev.next, nxt.prev = nxt, prev
            self.prev = self.next = None

    def insert_after(self, prev: _Run) -> None:
        nxt = prev.next
        assert nxt is not None
        self.prev, self.next = prev, nxt
        prev.next = nxt.prev = self


class PromptIndex(_SlotIndex):
    """:class:`PrefixIndex`'s LRU for blocks that only ever arrive as whole prompts (chained keys
    from block 0) and leave only by eviction, expiry or :meth:`clear_slot`: what routing
    records. Per block, adding and evicting only update the owner masks (C-level ``map`` /
    ``update``); the rest costs O(log prompt) Python steps, plus a few per run evicted.

    Why it is the same LRU. Each replica's blocks form a tree (a chained key names its whole
    prefix, so a block's parent is the block before it). Adding a prompt uses every block on
    its path, deepest first, so a block is never less recent than a block below it: the least
    recently used block is always a leaf, and among leaves the order is (last use, deeper
    first). A leaf's last use is exact if only the block a prompt ends at records the use and
    an evicted leaf hands its last use up to its parent. Two leaves never share a last use (one
    prompt's path holds one leaf), so "deeper first" only orders blocks of one path.

    The tree is stored run-compressed: a :class:`_Run` is a chain of blocks last used by the
    same prompt, so it is evicted deepest block first, as many blocks at once as needed. A
    prompt's new blocks ``keys[held:]`` form one new run below the run ending with
    ``keys[held - 1]``, or extend that run if it is a leaf (all of it is used now); a run is
    split where a prompt ends or branches inside it. The run a prompt ends in records the use
    (``tick``, ``stamp``); a run leaving the tree hands them to its parent if newer.

    Leaf runs are linked in use order per replica: a used leaf moves to the most recent end,
    and a parent left a leaf when its last child leaves takes that child's place at the least
    recent end (the child was the least recently used leaf, and the parent now has its last
    use), unless a prompt ended at the parent itself later: such a leaf waits in a small heap
    (stale entries skipped). Evicting takes the older of the two. A replica's runs are found by
    their first key (a chained key is at one depth only): the run holding ``keys[held - 1]``
    is the one whose first key is the last such key at or before it.

    Every replica's blocks are *prefix-closed*: with a block, a replica holds every block before
    it, so :func:`match_lengths` bisects (and so does :meth:`add_blocks`, on the owner masks).
    ``ttl_s`` stamps follow use order when the clock is monotonic (as the selector's is), so
    expiry pops the same leaves.
    """

    prefix_closed = True

    def __init__(self, default_capacity: int, max_capacity: int, ttl_s: float | None = None):
        super().__init__(default_capacity, max_capacity, ttl_s)
        # Per slot: first key -> run, blocks held, the leaf list's head (its `next` is the
        # least recently used leaf), the late leaves' heap and the length past which its stale
        # entries are dropped.
        self._runs: list[dict[int, _Run]] = []
        self._count: list[int] = []
        self._lru: list[_Run] = []
        self._late: list[list[tuple[int, _Run]]] = []
        self._late_limit: list[int] = []
        self._tick = 0

    def _slot(self, slot: int) -> dict[int, _Run]:
        while len(self._runs) <= slot:
            self._runs.append({})
            self._count.append(0)
            self._lru.append(_head())
            self._late.append([])
            self._late_limit.append(64)
            self._capacity.append(self.default_capacity)
        return self._runs[slot]

    def entries(self, slot: int) -> int:
        self._slot(slot)
        return self._count[slot]

    def _held(self, bit: int, keys: Sequence[int], present: int) -> int:
        """How many leading ``keys`` the slot holds (``present``: a lower bound, if right)."""
        get = self._owners.get
        lo, hi = 0, len(keys)  # keys[:lo] held; keys[:hi + 1] not (when hi < len)
        if 0 < present <= hi and get(keys[present - 1], 0) & bit:
            lo = present
        if lo == hi or not get(keys[lo], 0) & bit:
            return lo
        lo += 1
        if lo < hi and get(keys[hi - 1], 0) & bit:
            return hi
        while lo < hi:  # prefix closure: keys[i] is held for i < answer only
            mid = (lo + hi) // 2
            if get(keys[mid], 0) & bit:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def add_blocks(self, slot: int, keys: Sequence[int], now: float, present: int = 0) -> None:
        """Record a whole prompt's ``keys`` on ``slot`` (see :meth:`PrefixIndex.add_blocks`)."""
        if not keys:
            return
        runs = self._slot(slot)
        bit = 1 << slot
        self._tick += 1
        stamp = now + self.ttl_s if self.ttl_s is not None else 0.0
        self._next_expiry = min(self._next_expiry, stamp)
        held = self._held(bit, keys, present)
        run = self._path_end(runs, keys, held) if held else None
        if run is None:  # (held, unless keys that are not chained fooled the bisection)
            held = 0
        if held < len(keys):
            new = tuple(islice(keys, held, None))
            owners = self._owners
            owners.update(zip(new, map(bit.__or__, map(owners.get, new, repeat(0))), strict=True))
            self._count[slot] += len(new)
            if run is not None and not run.children:  # continues a leaf: all of it used now
                run.keys += new
            else:
                child = _Run(new, run, 0, 0.0)
                if run is not None:
                    run.children += 1
                runs[new[0]] = run = child
        assert run is not None
        run.tick, run.stamp = self._tick, stamp
        if not run.children:  # the most recently used leaf now
            head = self._lru[slot]
            if head.prev is not run:
                run.unlink()
                assert head.prev is not None
                run.insert_after(head.prev)
        if self._count[slot] > self._capacity[slot]:
            self._evict(slot)

    def _path_end(self, runs: dict[int, _Run], keys: Sequence[int], held: int) -> _Run | None:
        """The run ending with ``keys[held - 1]`` (split there if the prompt's path leaves the
        tree inside a run), or None where the tree disagrees (keys that are not chained)."""
        upward = islice(reversed(keys), len(keys) - held, None)  # keys[held - 1], then before
        back = next(compress(count(), map(runs.__contains__, upward)), None)
        if back is None:
            return None
        run = runs[keys[held - 1 - back]]  # the run starting `back` blocks before the end
        cut = back + 1  # its blocks on the path
        if cut > len(run.keys) or run.keys[cut - 1] != keys[held - 1]:
            return None
        if cut == len(run.keys):
            return run
        # Split: a new upper run takes the first `cut` blocks; `run` keeps the rest, its
        # children and its place among the leaves.
        upper = _Run(run.keys[:cut], run.parent, run.tick, run.stamp)
        upper.children = 1
        run.keys = run.keys[cut:]
        run.parent = upper
        runs[upper.keys[0]] = upper
        runs[run.keys[0]] = run
        return upper

    def _oldest_leaf(self, slot: int) -> _Run | None:
        """The least recently used leaf run of ``slot``."""
        late = self._late[slot]
        while late and (late[0][1].children or late[0][1].tick != late[0][0]):
            heapq.heappop(late)  # stale: used again since, or gone
        head = self._lru[slot]
        oldest = head.next
        if late and (oldest is head or oldest is None or late[0][0] < oldest.tick):
            return late[0][1]
        return None if oldest is head else oldest

    def _unlink(self, slot: int, run: _Run) -> tuple[int, ...]:
        """Take leaf ``run`` (the least recently used) out of the tree and return its keys; its
        parent inherits its last use if newer."""
        late = self._late[slot]
        if late and late[0][1] is run:
            heapq.heappop(late)
        else:
            run.unlink()
        keys, run.keys, run.children = run.keys, (), -1
        runs = self._runs[slot]
        if runs.get(keys[0]) is run:
            del runs[keys[0]]
        parent, run.parent = run.parent, None
        if parent is not None:
            parent.children -= 1
            if run.tick >= parent.tick:
                parent.tick, parent.stamp = run.tick, run.stamp
                if not parent.children:  # now the least recently used leaf
                    parent.insert_after(self._lru[slot])
            elif not parent.children:  # a prompt ended at it later: out of order
                heapq.heappush(late, (parent.tick, parent))
                if len(late) > self._late_limit[slot]:
                    live = [(t, r) for t, r in late if not r.children and r.tick == t]
                    heapq.heapify(live)
                    self._late[slot] = live
                    self._late_limit[slot] = 2 * len(live) + 64
        return keys

    def _forget(self, slot: int, victims: list[int]) -> None:
        self._count[slot] -= len(victims)
        self._drop_owners(victims, 1 << slot)

    def _evict(self, slot: int) -> None:
        excess = self._count[slot] - self._capacity[slot]
        victims: list[int] = []
        while excess > 0 and (run := self._oldest_leaf(slot)) is not None:
            if len(run.keys) > excess:  # the run's deepest `excess` blocks
                victims += run.keys[-excess:]
                run.keys = run.keys[:-excess]
                break
            excess -= len(run.keys)
            victims += self._unlink(slot, run)
        if victims:
            self._forget(slot, victims)

    def clear_slot(self, slot: int) -> None:
        """Forget every block of ``slot``: every run is a leaf or above one."""
        self._slot(slot)
        head, late = self._lru[slot], self._late[slot]
        leaves = [r for _, r in late if not r.children]
        nxt = head.next
        while nxt is not None and nxt is not head:
            leaf, nxt = nxt, nxt.next
            leaf.prev = leaf.next = None  # no cycles left for the collector
            leaves.append(leaf)
        seen: set[_Run] = set()
        keys: list[int] = []
        for leaf in leaves:
            up: _Run | None = leaf
            while up is not None and up not in seen:
                seen.add(up)
                keys += up.keys
                up = up.parent
        self._drop_owners(keys, 1 << slot)
        self._runs[slot] = {}
        self._count[slot] = 0
        self._lru[slot] = _head()
        self._late[slot] = []
        self._late_limit[slot] = 64

    def expire(self, now: float) -> None:
        """Drop blocks whose TTL has passed (no-op without ``ttl_s``)."""
        if self.ttl_s is None or now < self._next_expiry:
            return
        next_expiry = float("inf")
        for slot in range(len(self._runs)):
            victims: list[int] = []
            while (run := self._oldest_leaf(slot)) is not None:
                if run.stamp > now:
                    next_expiry = min(next_expiry, run.stamp)
                    break
                victims += self._unlink(slot, run)
            if victims:
                self._forget(slot, victims)
        self._next_expiry = next_expiry


def _head() -> _Run:
    """The head of an empty use-ordered list of leaves (it links to itself both ways)."""
    head = _Run((), None, 0, 0.0)
    head.prev = head.next = head
    return head


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
