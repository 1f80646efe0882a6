"""The prefix indexes: one LRU of block keys per replica, kept as ordered dicts
(:class:`PrefixIndex`, fed by KV events) or as prompt trees (:class:`PromptIndex`, fed by routed
prompts), and the per-replica longest-prefix match. The tree must evict exactly what the ordered
dict evicts, and the bisecting match must find exactly what the full walk finds."""

from __future__ import annotations

import random
import tracemalloc
from collections import OrderedDict

import pytest

from router.prefix_index import (
    INDEX_BYTES_PER_BLOCK,
    PROMPT_INDEX_BYTES_PER_BLOCK,
    PrefixIndex,
    match_lengths,
)
from router.prompt_index import PromptIndex

Index = PrefixIndex | PromptIndex


@pytest.fixture(params=[PrefixIndex, PromptIndex])
def index_class(request: pytest.FixtureRequest) -> type[Index]:
    cls: type[Index] = request.param
    return cls


def test_index_evicts_a_prefix_from_its_tail_first(index_class: type[Index]) -> None:
    ix = index_class(4, 100)
    ix.add_blocks(0, [1, 2, 3], now=0)
    ix.add_blocks(0, [7, 8], now=0)  # capacity 4: the tail of the older prefix goes first
    assert [ix.owners(k) for k in (1, 2, 3, 7, 8)] == [1, 1, 0, 1, 1]
    assert ix.entries(0) == 4


def test_index_touch_refreshes_recency(index_class: type[Index]) -> None:
    ix = index_class(3, 100)
    ix.add_blocks(0, [1, 2], now=0)
    ix.add_blocks(0, [9], now=0)
    ix.add_blocks(0, [1, 2], now=0, present=2)
    ix.add_blocks(0, [5], now=0)  # evicts 9, the least recent
    assert ix.owners(9) == 0 and ix.owners(1) == 1 and ix.owners(2) == 1


def test_index_masks_track_every_replica_and_capacity_is_bounded(index_class: type[Index]) -> None:
    ix = index_class(10, 50)
    ix.add_blocks(0, [1, 2], now=0)
    ix.add_blocks(3, [1], now=0)
    assert ix.owners(1) == 0b1001 and ix.owners(2) == 0b0001
    ix.set_capacity(0, 10**9)
    assert ix.capacity(0) == 50
    ix.clear_slot(3)
    assert ix.owners(1) == 0b0001
    ix.set_capacity(0, 1)  # shrinking evicts, deepest first
    assert (ix.owners(1), ix.owners(2), ix.entries(0)) == (1, 0, 1)


def test_prefix_index_removes_single_blocks() -> None:
    ix = PrefixIndex(10, 50)
    ix.add_blocks(0, [1, 2], now=0)
    ix.add_blocks(3, [1], now=0)
    ix.remove_blocks(0, [1, 99])
    assert (ix.owners(1), ix.owners(2)) == (0b1000, 0b0001)


def test_index_ttl_entries_expire(index_class: type[Index]) -> None:
    ix = index_class(10, 10, ttl_s=5.0)
    ix.add_blocks(0, [1, 2], now=0.0)
    ix.add_blocks(0, [3], now=3.0)
    ix.expire(now=4.0)  # nothing due yet
    assert ix.entries(0) == 3
    ix.expire(now=5.5)
    assert (ix.owners(1), ix.owners(2), ix.owners(3)) == (0, 0, 1)
    ix.add_blocks(0, [1], now=6.0)
    ix.expire(now=8.5)
    assert (ix.owners(1), ix.owners(3)) == (1, 0)


def test_match_lengths_per_replica(index_class: type[Index]) -> None:
    ix = index_class(100, 100)
    ix.add_blocks(0, [1, 2, 3], now=0)
    ix.add_blocks(1, [1, 2], now=0)
    ix.add_blocks(2, [9], now=0)
    assert match_lengths([1, 2, 3, 4], 0b111, [ix]) == {0: 3, 1: 2}
    assert match_lengths([1, 2, 3], 0b110, [ix]) == {1: 2}
    assert match_lengths([5, 1], 0b111, [ix]) == {}
    other = index_class(100, 100)
    other.add_blocks(1, [1, 2, 3], now=0)
    assert match_lengths([1, 2, 3], 0b111, [ix, other]) == {0: 3, 1: 3}


def test_match_lengths_order_is_depth_then_slot() -> None:
    ix = PromptIndex(100, 100)
    for slot, depth in ((5, 2), (1, 4), (3, 2), (0, 1)):
        ix.add_blocks(slot, [1, 2, 3, 4][:depth], now=0)
    assert list(match_lengths([1, 2, 3, 4], 0b111111, [ix]).items()) == [
        (0, 1), (3, 2), (5, 2), (1, 4)
    ]  # fmt: skip


def _prompts(rng: random.Random) -> list[list[int]]:
    """Chained keys of a family of prompts that share prefixes (a key names its prefix)."""
    roots = [rng.getrandbits(60) for _ in range(3)]
    prompts: list[list[int]] = []
    for _ in range(30):
        base = rng.choice(prompts) if prompts and rng.random() < 0.7 else [rng.choice(roots)]
        keys = base[: rng.randrange(1, len(base) + 1)]
        for _ in range(rng.randrange(0, 25)):
            keys = [*keys, hash((keys[-1], rng.getrandbits(8))) & (2**63 - 1)]
        prompts.append(keys)
    return prompts


class ReferenceLru:
    """The LRU both indexes implement, written out plainly: every block of an added prompt
    moves to the most recent end, deepest first; evict from the least recent end."""

    def __init__(self, capacity: int, ttl_s: float | None) -> None:
        self.capacity = capacity
        self.ttl_s = ttl_s
        self.lru: dict[int, OrderedDict[int, float]] = {}

    def add(self, slot: int, keys: list[int], now: float) -> None:
        lru = self.lru.setdefault(slot, OrderedDict())
        for key in reversed(keys):
            lru.pop(key, None)
            lru[key] = now + (self.ttl_s or 0.0)
        while len(lru) > self.capacity:
            lru.popitem(last=False)

    def expire(self, now: float) -> None:
        for lru in self.lru.values():
            while lru and next(iter(lru.values())) <= now:
                lru.popitem(last=False)

    def owners(self, key: int) -> int:
        return sum(1 << slot for slot, lru in self.lru.items() if key in lru)

    def match(self, keys: list[int], candidates: int) -> dict[int, int]:
        out = {}
        for slot, lru in self.lru.items():
            depth = 0
            while depth < len(keys) and keys[depth] in lru:
                depth += 1
            if depth and candidates >> slot & 1:
                out[slot] = depth
        return out


@pytest.mark.parametrize("seed", range(12))
def test_both_indexes_keep_the_reference_lru_on_whole_prompts(seed: int) -> None:
    rng = random.Random(seed)
    capacity, ttl = rng.randrange(3, 120), rng.choice([None, 3.0])
    ref = ReferenceLru(capacity, ttl)
    indexes: list[Index] = [PrefixIndex(capacity, 1000, ttl), PromptIndex(capacity, 1000, ttl)]
    prompts = _prompts(rng)
    universe = {k for p in prompts for k in p}
    now = 0.0
    for _ in range(250):
        now += rng.random()
        keys = rng.choice(prompts)
        keys = keys[: rng.randrange(1, len(keys) + 1)]
        candidates = rng.randrange(1, 64)
        expected = ref.match(keys, candidates)
        for ix in indexes:
            assert match_lengths(keys, candidates, [ix]) == expected
        slot = rng.randrange(6)
        present = expected.get(slot, 0) if rng.random() < 0.8 else 0
        ref.add(slot, keys, now)
        for ix in indexes:
            ix.add_blocks(slot, keys, now, present)
        if ttl is not None and rng.random() < 0.3:
            ref.expire(now)
            for ix in indexes:
                ix.expire(now)
        for key in rng.sample(sorted(universe), 20):
            assert [ix.owners(key) for ix in indexes] == [ref.owners(key)] * 2


@pytest.mark.parametrize("seed", range(6))
def test_prefix_index_keeps_the_reference_lru_under_events(seed: int) -> None:
    rng = random.Random(seed)
    ix = PrefixIndex(rng.randrange(3, 40), 50)
    lru: dict[int, OrderedDict[int, None]] = {}
    for _ in range(300):
        slot = rng.randrange(4)
        keys = [rng.randrange(1, 60) for _ in range(rng.randrange(0, 10))]
        if rng.random() < 0.7:
            ix.add_blocks(slot, keys, now=0.0)
            mine = lru.setdefault(slot, OrderedDict())
            for key in reversed(keys):
                mine.pop(key, None)
                mine[key] = None
            while len(mine) > ix.capacity(slot):
                mine.popitem(last=False)
        else:
            ix.remove_blocks(slot, keys)
            for key in keys:
                lru.setdefault(slot, OrderedDict()).pop(key, None)
        for key in range(1, 60):
            assert ix.owners(key) == sum(1 << s for s, m in lru.items() if key in m)


@pytest.mark.parametrize(
    ("index_class", "bound"),
    [(PrefixIndex, INDEX_BYTES_PER_BLOCK), (PromptIndex, PROMPT_INDEX_BYTES_PER_BLOCK)],
)
def test_index_memory_per_block_is_what_we_report(index_class: type[Index], bound: int) -> None:
    rng = random.Random(0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        ix = index_class(50_000, 50_000)
        for _ in range(1000):  # full, then as many blocks again evicted: the steady state
            ix.add_blocks(0, [rng.getrandbits(64) for _ in range(100)], now=0)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert ix.total_entries() == 50_000
    assert used / ix.total_entries() <= bound


@pytest.mark.parametrize("seed", range(40))
def test_prompt_index_evicts_exactly_what_the_prefix_index_evicts(seed: int) -> None:
    """Step by step on whole prompts (shared prefixes, branches mid-prompt, prefixes of earlier
    prompts; right and zero ``present`` hints; several slots; capacities that force eviction,
    shrinking and growing; TTL expiry on a monotonic clock; cleared slots): the tree holds
    the same blocks as the ordered dicts, so the owner masks are equal after every step."""
    rng = random.Random(seed)
    capacity, ttl = rng.randrange(2, 80), rng.choice([None, None, 2.0, 10.0])
    ref, tree = PrefixIndex(capacity, 120, ttl), PromptIndex(capacity, 120, ttl)
    prompts = _prompts(rng)
    slots = rng.randrange(1, 6)
    now = 0.0
    for _ in range(400):
        now += rng.random()
        slot = rng.randrange(slots)
        op = rng.random()
        if op < 0.04:
            blocks = rng.randrange(1, 2 * capacity + 2)
            ref.set_capacity(slot, blocks)
            tree.set_capacity(slot, blocks)
        elif op < 0.06:
            ref.clear_slot(slot)
            tree.clear_slot(slot)
        elif op < 0.15 and ttl is not None:
            ref.expire(now)
            tree.expire(now)
        else:
            keys = rng.choice(prompts)
            if rng.random() < 0.5:  # a prefix of an earlier prompt, or a branch off it
                keys = keys[: rng.randrange(1, len(keys) + 1)]
            held = match_lengths(keys, 1 << slot, [ref]).get(slot, 0)
            present = rng.choice([held, 0, rng.randrange(held + 1)])
            ref.add_blocks(slot, keys, now, present)
            tree.add_blocks(slot, keys, now, present)
        assert tree._owners == ref._owners
        assert [tree.entries(s) for s in range(slots)] == [ref.entries(s) for s in range(slots)]
        assert tree.total_entries() == ref.total_entries()


@pytest.mark.parametrize("seed", range(10))
def test_prompt_index_survives_keys_that_are_not_chained(seed: int) -> None:
    """Keys repeated at other depths or twice in a prompt break the tree's premise: the index
    may then misjudge recency, but it stays bounded and consistent (a cleared slot owns
    nothing)."""
    rng = random.Random(seed)
    ix = PromptIndex(rng.randrange(2, 30), 100, rng.choice([None, 2.0]))
    now = 0.0
    for _ in range(300):
        now += rng.random()
        slot = rng.randrange(3)
        if rng.random() < 0.05:
            ix.clear_slot(slot)
            assert not any(ix.owners(key) & 1 << slot for key in range(40))
            assert ix.entries(slot) == 0
            continue
        keys = [rng.randrange(40) for _ in range(rng.randrange(1, 12))]
        ix.add_blocks(slot, keys, now, rng.randrange(len(keys) + 1))
        ix.expire(now)
        assert ix.entries(slot) <= ix.capacity(slot)
