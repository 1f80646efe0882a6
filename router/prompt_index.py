"""The routing-side prefix index: :class:`PromptIndex`, a tree of chained blocks per replica
stored as runs of blocks used together, filled whole prompts at a time as requests are routed.
Same LRU contract as :class:`~router.prefix_index.PrefixIndex` (see that module): the least
recently used block goes first, deepest first among blocks used together.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from itertools import compress, count, islice, repeat

from router.prefix_index import _SlotIndex


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
