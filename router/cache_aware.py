"""KV-cache-aware replica choice: send a request where its prompt prefix is already cached, unless
that replica is busier than the saving is worth, and never let one replica run away.

Inputs per request: the prompt's token ids (``RequestFeatures.prompt_token_ids``, tokenized by
the gateway exactly as vLLM will), hashed into vLLM's chained block hashes
(``router/block_hash.py``). Inputs per replica: the gateway's in-flight count (``ReplicaView``)
and what the replica's ``/metrics`` last said (:class:`ReplicaLoad`: running and waiting
requests, KV cache usage, KV capacity in blocks).

The prefix index (:class:`PrefixIndex`) maps block key -> bit mask of replicas holding it, and
keeps one LRU of block keys per replica, bounded by that replica's capacity
``min(max_index_blocks, capacity_fraction * num_gpu_blocks)``; memory is therefore bounded by
construction (about 200 bytes per indexed block). The longest cached prefix on every replica is
found in one walk over the prompt's blocks (chained hashes: a block can only be reused if all
blocks before it are), O(prompt blocks + replicas).

- approximate mode: when a request is routed, its prompt blocks are recorded on the chosen
  replica, deepest block first, so the first blocks are the most recent and the LRU evicts a
  prefix from its tail as vLLM does (it frees a request's blocks tail first).
- precise mode: the index holds what vLLM reports in its KV cache events (blocks stored and
  removed, cache cleared; ``router/kv_events.py``). Routed prefixes are also recorded in a small
  *pending* index whose entries expire after ``pending_ttl_s``: they cover the time between
  routing and vLLM's event, so a burst of requests for one new prefix lands together.

The decision, for the healthy replicas ``R``:

1. ``load(r) = max(in_flight(r), running(r) + waiting(r))``; the scraped term counts only while
   fresher than ``load.stale_after_s`` (it also sees other gateways' traffic).
2. Guards, in order; each removes replicas, and is skipped when it would remove them all:
   - imbalance: with ``m = min load``, a replica is *overloaded* when ``load > m +
     balance_abs_threshold`` **and** ``load > m * balance_rel_threshold``;
   - share: a replica that received more than ``max_share_ratio`` times the mean share of the
     last ``share_window_per_replica * |R|`` requests (exponentially decayed counts);
   - memory: KV usage above ``kv_usage_limit`` (running requests hold nearly every block: a new
     one would wait or preempt).
   These are what stop the "every miss goes to the emptiest cache" and "hot prefix owns one
   replica" spirals: a hot prefix spills to a second replica, which then caches it too.
3. Among the remaining replicas, minimise ``cost(r) = uncached_tokens(r) + load_cost_tokens *
   load(r)``: a replica must save ``load_cost_tokens`` prefill tokens per extra request it holds.
4. Ties (typically: nothing cached anywhere, equal load) are broken by a hash of the block
   halfway into the prompt: deep enough to tell repositories apart behind a shared system prompt,
   shallow enough that a session's turns and its sibling sessions agree. A new prefix family thus
   has a stable home while the replica set stands still, and different families spread evenly.

Why the defaults (``router/selector_config.py``; swept with ``loadtests/replica_sim.py``):

- ``load_cost_tokens = 128``. The greedy TTFT-optimal weight is a request's mean service time in
  prefill-token units (~1000 in the simulator); a miss also adds its whole prefill to the queue
  of every request behind it, which the greedy weight ignores. Below ~256 the hit rate holds up
  near saturation (at 8-10x load, p90 2-3x better than with 512-1024); elsewhere within 10%.
- ``balance_abs_threshold = 16``, ``balance_rel_threshold = 1.5``: SGLang uses 64 / 1.5 for GPU
  batch sizes; 16 is a CPU replica's batch. Smaller gaps are the cost term's business.
- ``max_share_ratio = 1.2`` over ``share_window_per_replica = 128`` requests: bounds max/mean
  requests per replica near 1.25 for a few points of hit rate; 128 keeps counting noise
  (1/sqrt(128), 9%) well inside the 20% margin, so noise alone rarely trips it.
- ``kv_usage_limit = 0.98``: vLLM's usage counts blocks held by running requests only (cached
  free blocks do not count), so near 1.0 a new request waits for memory.
- ``capacity_fraction = 0.9``: some blocks always belong to running requests' fresh tokens.
- ``pending_ttl_s = 10``: longer than a prefill waits in a saturated replica's queue.

Cost (``make bench-kv``, 64 replicas, 120-block prompts, a busy 2-core box): the choice ~40-70 us
at p50; hashing ~4 us per new block, ~0.7 us per repeated one (memo).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Literal

from router.block_hash import BlockHasher
from router.features import RequestFeatures
from router.kv_events import KvEvent, apply_events
from router.replicas import NoHealthyReplicaError, ReplicaView
from router.selector_config import CacheAwareConfig

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_GOLDEN64 = 0x9E37_79B9_7F4A_7C15
# Measured with tracemalloc (tests/router/test_cache_aware.py checks it): LRU entry, owner-map
# entry and the int key, per indexed block.
INDEX_BYTES_PER_BLOCK = 200


def prompt_token_ids(features: RequestFeatures) -> Sequence[int] | None:
    """The prompt's token ids if the gateway supplied them (field added in a later version)."""
    tokens: Sequence[int] | None = getattr(features, "prompt_token_ids", None)
    return tokens


def rendezvous(key: int, salt: int) -> int:
    """A well-mixed 64-bit score of (key, replica salt) for highest-random-weight choice."""
    x = ((key ^ salt) * _GOLDEN64) & _MASK64
    x ^= x >> 29
    return (x * _GOLDEN64) & _MASK64


def replica_salt(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One replica's ``/metrics`` reading."""

    running: int
    waiting: int
    kv_usage: float
    observed_at: float
    num_blocks: int | None = None
    block_size: int | None = None


class LoadBook:
    """Latest :class:`ReplicaLoad` per replica, combined with the gateway's in-flight counts.

    Replicas get small integer slots (also their bit in :class:`PrefixIndex` masks); readings
    are kept in per-slot lists so a decision reads them without dict lookups.
    """

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self._slots: dict[str, int] = {}
        self._slot_lists: dict[tuple[str, ...], list[int]] = {}
        self._readings: list[ReplicaLoad | None] = []
        self._queued: list[float] = []  # running + waiting, per slot
        self._kv_usage: list[float] = []
        self._seen_at: list[float] = []  # -inf until a reading arrives

    def slot_of(self, name: str) -> int:
        slot = self._slots.get(name)
        if slot is None:
            slot = self._slots[name] = len(self._slots)
            self._readings.append(None)
            self._queued.append(0.0)
            self._kv_usage.append(0.0)
            self._seen_at.append(float("-inf"))
        return slot

    def slots_of(self, views: Sequence[ReplicaView]) -> list[int]:
        """Slots of ``views`` in order (memoised per replica list; bounded)."""
        names = tuple(v.name for v in views)
        slots = self._slot_lists.get(names)
        if slots is None:
            if len(self._slot_lists) > 256:
                self._slot_lists.clear()
            slots = self._slot_lists[names] = [self.slot_of(n) for n in names]
        return slots

    def names(self) -> dict[str, int]:
        return dict(self._slots)

    def update(self, name: str, load: ReplicaLoad) -> None:
        slot = self.slot_of(name)
        self._readings[slot] = load
        self._queued[slot] = float(load.running + load.waiting)
        self._kv_usage[slot] = load.kv_usage
        self._seen_at[slot] = load.observed_at

    def get(self, name: str) -> ReplicaLoad | None:
        slot = self._slots.get(name)
        return None if slot is None else self._readings[slot]

    def loads(self, views: Sequence[ReplicaView], slots: Sequence[int], now: float) -> list[float]:
        """``max(in_flight, running + waiting)`` per view; stale readings count as absent."""
        cutoff = now - self.stale_after_s
        queued, seen = self._queued, self._seen_at
        return [
            max(float(v.in_flight), queued[s]) if seen[s] >= cutoff else float(v.in_flight)
            for v, s in zip(views, slots, strict=True)
        ]

    def kv_usages(self, slots: Sequence[int], now: float) -> list[float]:
        """KV cache usage (0..1) per slot; 0 where the reading is stale or missing."""
        cutoff = now - self.stale_after_s
        usage, seen = self._kv_usage, self._seen_at
        return [usage[s] if seen[s] >= cutoff else 0.0 for s in slots]


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


Reason = Literal["prefix", "load", "tie"]


@dataclass(frozen=True, slots=True)
class Selection:
    """Why the last request went where it went (for logs, metrics and tests)."""

    replica: str
    matched_blocks: int
    prompt_blocks: int
    load: float
    reason: Reason
    guarded: str  # comma-separated guards that removed replicas, "" if none


class CacheAwareSelector:
    """``router.replicas.ReplicaSelector`` that scores prefix-cache match against load."""

    def __init__(
        self, config: CacheAwareConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self._clock = clock
        self.hasher = BlockHasher(
            config.block_size, config.hash_algo, config.none_hash_seed, config.memo_blocks
        )
        self.load_book = LoadBook(config.load.stale_after_s)
        precise = config.mode == "precise"
        # approximate: the index itself models the cache; precise: events fill `index`, routing
        # fills the short-lived `pending` one.
        self.index = PrefixIndex(
            config.max_index_blocks if precise else config.default_capacity_blocks,
            config.max_index_blocks,
        )
        self.pending: PrefixIndex | None = (
            PrefixIndex(
                config.default_capacity_blocks, config.max_index_blocks, config.pending_ttl_s
            )
            if precise
            else None
        )
        self._salts: list[int] = []
        self._tally: list[float] = []
        self._unit = 1.0
        self._rr = 0
        self.last: Selection | None = None
        self.event_gaps = 0

    # -- observation hooks ------------------------------------------------------------------
    def slot_of(self, name: str) -> int:
        slot = self.load_book.slot_of(name)
        while len(self._salts) <= slot:
            self._salts.append(0)
            self._tally.append(0.0)
        if not self._salts[slot]:
            self._salts[slot] = replica_salt(name)
        return slot

    def update_load(self, name: str, load: ReplicaLoad) -> None:
        """Hook for the metrics scraper: a fresh ``/metrics`` reading of one replica."""
        slot = self.slot_of(name)
        self.load_book.update(name, load)
        if load.num_blocks is not None:
            blocks = int(load.num_blocks * self.config.capacity_fraction)
            # approximate: the index is the cache model; precise: only the routed-but-not-yet-
            # confirmed blocks are modelled (the event-fed index is bounded by max_index_blocks).
            modelled = self.pending if self.pending is not None else self.index
            modelled.set_capacity(slot, blocks)

    def apply_kv_events(self, name: str, events: Iterable[KvEvent]) -> int:
        """Hook for the KV event subscriber (precise mode); returns events applied."""
        return apply_events(self.index, self.slot_of(name), events, self._clock())

    def kv_events_lost(self, name: str, count: int) -> None:
        """Hook for the subscriber: ``count`` event batches of ``name`` never arrived."""
        self.event_gaps += count

    # -- decision ---------------------------------------------------------------------------
    def _guard(self, loads: list[float], slots: list[int], now: float) -> tuple[list[int], str]:
        """Indexes (into ``slots``) that survive the guards, and which guards removed some."""
        cfg = self.config
        n = len(slots)
        keep = list(range(n))
        guarded = []
        low = min(loads)
        bound = max(low + cfg.balance_abs_threshold, low * cfg.balance_rel_threshold)
        if max(loads) > bound:
            keep = [i for i in keep if loads[i] <= bound]
            guarded.append("imbalance")
        if cfg.max_share_ratio is not None:
            tallies = [self._tally[s] for s in slots]
            total = sum(tallies)
            # Only once the window holds a couple of requests per replica.
            if total >= 2.0 * n * self._unit:
                cap = cfg.max_share_ratio * total / n
                trimmed = [i for i in keep if tallies[i] <= cap]
                if trimmed and len(trimmed) < len(keep):
                    keep = trimmed
                    guarded.append("share")
        usage = self.load_book.kv_usages(slots, now)
        if max(usage) > cfg.kv_usage_limit:
            trimmed = [i for i in keep if usage[i] <= cfg.kv_usage_limit]
            if trimmed:
                keep = trimmed
                guarded.append("kv_usage")
        return keep, ",".join(guarded)

    def _record_share(self, slot: int, n_replicas: int) -> None:
        # Exponentially decayed request counts, decayed lazily: each new request weighs
        # 1 / (1 - 1/window) times more than the one before; rescaled before overflowing.
        window = self.config.share_window_per_replica * max(1, n_replicas)
        self._tally[slot] += self._unit
        self._unit /= 1.0 - 1.0 / window
        if self._unit > 1e100:
            self._tally = [t / self._unit for t in self._tally]
            self._unit = 1.0

    def select_replica(
        self, target: str, replicas: Sequence[ReplicaView], features: RequestFeatures
    ) -> str:
        healthy = [v for v in replicas if v.healthy]
        if not healthy:
            raise NoHealthyReplicaError(target)
        tokens = prompt_token_ids(features)
        keys = self.hasher.block_keys(tokens) if tokens else []
        return self.select_for_keys(healthy, keys, self._clock())

    def select_for_keys(
        self, healthy: Sequence[ReplicaView], keys: Sequence[int], now: float
    ) -> str:
        """The decision for already-hashed prompt blocks (``healthy`` must be non-empty)."""
        cfg = self.config
        slots = self.load_book.slots_of(healthy)
        if len(self._tally) < len(self.load_book.names()):
            for name in self.load_book.names():
                self.slot_of(name)
        loads = self.load_book.loads(healthy, slots, now)
        keep, guarded = self._guard(loads, slots, now)
        indexes = [self.index]
        if self.pending is not None:
            self.pending.expire(now)
            indexes.append(self.pending)
        candidates = 0
        for i in keep:
            candidates |= 1 << slots[i]
        matched = match_lengths(keys, candidates, indexes) if keys else {}
        # The best replica holding no prefix is the least loaded one, so only replicas with a
        # match and the least-loaded rest need a cost.
        low = min(loads[i] for i in keep)
        tied = [i for i in keep if loads[i] == low]
        if keys:
            tie_key = keys[len(keys) // 2]
        else:
            self._rr += 1
            tie_key = self._rr
        best = tied[rendezvous(tie_key, len(tied)) % len(tied)]
        best_cost = cfg.load_cost_tokens * low - cfg.block_size * matched.get(slots[best], 0)
        reason: Reason = "tie" if len(tied) > 1 else "load"
        if matched:
            index_of = {slots[i]: i for i in keep}
            for slot, depth in matched.items():
                i = index_of[slot]
                cost = cfg.load_cost_tokens * loads[i] - cfg.block_size * depth
                if cost < best_cost:
                    best, best_cost, reason = i, cost, "prefix"
        slot = slots[best]
        got = matched.get(slot, 0)
        if got and reason != "prefix":
            reason = "prefix"
        if keys:
            if self.pending is not None:
                self.pending.add_blocks(slot, keys, now)
            else:
                self.index.add_blocks(slot, keys, now, present=got)
        self._record_share(slot, len(healthy))
        self.last = Selection(healthy[best].name, got, len(keys), loads[best], reason, guarded)
        return healthy[best].name

    # -- introspection ----------------------------------------------------------------------
    def index_entries(self) -> dict[str, int]:
        """Blocks indexed per replica (confirmed + pending)."""
        out: dict[str, int] = {}
        for name, slot in self.load_book.names().items():
            n = self.index.entries(slot)
            if self.pending is not None:
                n += self.pending.entries(slot)
            out[name] = n
        return out

    def index_bytes_bound(self) -> int:
        """Upper bound on index memory per replica, in bytes."""
        blocks = self.index.max_capacity
        if self.pending is not None:
            blocks += self.pending.max_capacity
        return blocks * INDEX_BYTES_PER_BLOCK
