"""KV-cache-aware replica choice: send a request where its prompt prefix is already cached, unless
that replica is busier than the saving is worth, and never let one replica run away.

Inputs per request: the prompt's token ids (``RequestFeatures.prompt_token_ids``, tokenized by
the gateway exactly as vLLM will), hashed into vLLM's chained block hashes
(``router/block_hash.py``). Inputs per replica: the gateway's in-flight count (``ReplicaView``)
and what the replica's ``/metrics`` last said (:class:`ReplicaLoad`: running and waiting
requests, KV cache usage, KV capacity in blocks).

The prefix index (``router/prefix_index.py``) maps block key -> bit mask of replicas holding it,
and keeps one LRU of block keys per replica, bounded by that replica's capacity
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
  routing and vLLM's event, so a burst of requests for one new prefix lands together. Event
  batches lost for good (a sequence gap vLLM's replay socket could not fill,
  ``gateway/kv_event_subscriber.py``) make the replica's event-fed index untrustworthy: it is
  dropped (:meth:`CacheAwareSelector.kv_events_lost`) and refilled by the next events.

The decision, for the healthy replicas ``R``:

1. ``load(r) = max(in_flight(r), running(r) + waiting(r))``; the scraped term counts only while
   fresher than ``load.stale_after_s`` (it also sees other gateways' traffic).
2. Guards, in order; each removes replicas, and is skipped when it would remove them all:
   - imbalance: with ``m = min load``, a replica is *overloaded* when ``load > m +
     balance_abs_threshold`` **and** ``load > m * balance_rel_threshold``;
   - share: a replica that received more than ``max_share_ratio`` times the mean share of the
     last ``share_window_per_replica * |R|`` requests (exponentially decayed counts) *and* more
     than the mean plus ``share_noise_sd`` standard deviations of a fair random split of that
     window (with few requests counted, as after a start or a reload, counting noise alone
     exceeds 20% and used to push sessions off their cached replica), unless it is less loaded
     than every replica within its share (then it is faster, not hogging a hot prefix, and the
     guard would only queue requests on a slower replica);
   - memory: KV usage above ``kv_usage_limit`` (running requests hold nearly every block: a new
     one would wait or preempt).
   These are what stop the "every miss goes to the emptiest cache" and "hot prefix owns one
   replica" spirals: a hot prefix spills to a second replica, which then caches it too.
3. Among the remaining replicas, minimise ``cost(r) = uncached_tokens(r) + load_cost_tokens *
   load(r) - home_bonus_tokens * [r is the request's home]``: a replica must save
   ``load_cost_tokens`` prefill tokens per extra request it holds.
4. The *home* is the highest-random-weight replica (rendezvous hashing) for :func:`home_key`:
   the request's session (``episode_id``) if it names one, else the block at the largest
   power-of-two depth at most half the prompt (past a shared system prompt; the same for a
   conversation's turns until its prompt doubles). When the index knows nothing useful (a new
   prefix family, or one the approximate index has already evicted while vLLM still holds it)
   the request goes home unless home is more than ``home_bonus_tokens / load_cost_tokens``
   requests busier: a session stays on one replica like session affinity, different families
   spread evenly, gateways that do not share an index agree, and a replica set change moves
   only the homes of the replicas that changed. Equal costs prefer a known match, then home.

Why the defaults (``router/selector_config.py``; swept with ``loadtests/replica_sim.py``):

- ``load_cost_tokens = 128``. The greedy TTFT-optimal weight is a request's mean service time in
  prefill-token units (~1000 in the simulator); a miss also adds its whole prefill to the queue
  of every request behind it, which the greedy weight ignores. Below ~256 the hit rate holds up
  near saturation (at 8-10x load, p90 2-3x better than with 512-1024); elsewhere within 10%.
- ``balance_abs_threshold = 16``, ``balance_rel_threshold = 1.5``: SGLang uses 64 / 1.5 for GPU
  batch sizes; 16 is a CPU replica's batch. Smaller gaps are the cost term's business.
- ``max_share_ratio = 1.2`` over ``share_window_per_replica = 128`` requests: bounds max/mean
  requests per replica near 1.25 for a few points of hit rate; once the window is full, counting
  noise (1/sqrt(128), 9%) is well inside the 20% margin. ``share_noise_sd = 2`` covers the
  windows that are not full yet (a two-sigma excess is what a fair split rarely produces).
- ``home_bonus_tokens = 256``: two requests of load at ``load_cost_tokens``; a session keeps its
  replica through the small load differences of a moderately loaded fleet, while a replica
  that is really busier still sheds new work. (On the real bench without it, 20 of 113
  continuing turns changed replica, most with nothing left in the index and one to a few
  requests of load difference, while vLLM still held part of their context.)
- ``kv_usage_limit = 0.98``: vLLM's usage counts blocks held by running requests only (cached
  free blocks do not count), so near 1.0 a new request waits for memory.
- ``capacity_fraction = 0.9``: some blocks always belong to running requests' fresh tokens.
- ``pending_ttl_s = 10``: longer than a prefill waits in a saturated replica's queue.

Cost (``make bench-kv``, 64 replicas, 120-block prompts, a busy 2-core box): the choice ~40-70 us
at p50; hashing ~4 us per new block, ~0.7 us per repeated one (memo).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from router.block_hash import BlockHasher
from router.features import RequestFeatures
from router.kv_events import KvEvent, apply_events
from router.prefix_index import INDEX_BYTES_PER_BLOCK, PrefixIndex, match_lengths
from router.replicas import NoHealthyReplicaError, ReplicaView
from router.selector_config import CacheAwareConfig

__all__ = [
    "INDEX_BYTES_PER_BLOCK",
    "CacheAwareSelector",
    "LoadBook",
    "PrefixIndex",
    "ReplicaLoad",
    "Selection",
    "home_key",
    "match_lengths",
]

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_GOLDEN64 = 0x9E37_79B9_7F4A_7C15


def prompt_token_ids(features: RequestFeatures) -> Sequence[int] | None:
    """The prompt's token ids if the gateway supplied them (field added in a later version)."""
    tokens: Sequence[int] | None = getattr(features, "prompt_token_ids", None)
    return tokens


def rendezvous(key: int, salt: int) -> int:
    """A well-mixed 64-bit score of (key, replica salt) for highest-random-weight choice."""
    x = ((key ^ salt) * _GOLDEN64) & _MASK64
    x ^= x >> 29
    return (x * _GOLDEN64) & _MASK64


def hash64(text: str) -> int:
    """A stable 64-bit hash of ``text`` (replica salts, session home keys)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def replica_salt(name: str) -> int:
    return hash64(name)


def home_key(keys: Sequence[int], session: str | None) -> int | None:
    """What names a request's home replica: its session if it has one, else the block at the
    largest power-of-two depth at most half the prompt (past a shared system prompt, and the
    same for a conversation's turns until its prompt doubles); None without either."""
    if session:
        return hash64(session)
    if not keys:
        return None
    depth = 1 << ((len(keys) // 2).bit_length() - 1) if len(keys) > 1 else 0
    return keys[depth]


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


Reason = Literal["prefix", "home", "load"]


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
        self.index_resets = 0

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
        """Hook for the subscriber: ``count`` event batches of ``name`` are lost for good (the
        replay could not fill the gap). Precise mode drops that replica's event-fed index: it
        may list evicted blocks and lack stored ones, and new events refill it; meanwhile the
        pending index (what was routed there) scores it, as approximate mode would."""
        self.event_gaps += count
        self.index_resets += 1
        if self.pending is not None:
            self.index.clear_slot(self.slot_of(name))

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
        if cfg.max_share_ratio is not None and n > 1:
            tallies = [self._tally[s] for s in slots]
            total = sum(tallies)
            # In requests: the window's mean per replica, and a fair random split's spread.
            mean = total / n / self._unit
            spread = math.sqrt(mean * (1.0 - 1.0 / n))
            cap = max(cfg.max_share_ratio * mean, mean + cfg.share_noise_sd * spread)
            # Only once the window holds a couple of requests per replica.
            limit = cap * self._unit
            within = [i for i in keep if tallies[i] <= limit]
            if mean >= 2.0 and within and len(within) < len(keep):
                # An over-share replica less busy than every other one is faster, not hogging
                # a hot prefix: sending its requests to a busier replica would only queue them.
                least = min(loads[i] for i in within)
                trimmed = [i for i in keep if tallies[i] <= limit or loads[i] < least]
                if len(trimmed) < len(keep):
                    keep = trimmed
                    guarded.append("share")
        usage = self.load_book.kv_usages(slots, now)
        if max(usage) > cfg.kv_usage_limit:
            trimmed = [i for i in keep if usage[i] <= cfg.kv_usage_limit]
            if trimmed:
                keep = trimmed
                guarded.append("kv_usage")
        return keep, ",".join(guarded)

    def _home_of(self, key: int, keep: Sequence[int], slots: Sequence[int]) -> int:
        """The index in ``keep`` with the highest :func:`rendezvous` score for ``key`` (inlined:
        this runs for every candidate of every request)."""
        salts = self._salts
        best, best_score = keep[0], -1
        for i in keep:
            x = ((key ^ salts[slots[i]]) * _GOLDEN64) & _MASK64
            x ^= x >> 29
            x = (x * _GOLDEN64) & _MASK64
            if x > best_score:
                best, best_score = i, x
        return best

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
        home = home_key(keys, features.episode_id)
        return self.select_for_keys(healthy, keys, self._clock(), home)

    def select_for_keys(
        self,
        healthy: Sequence[ReplicaView],
        keys: Sequence[int],
        now: float,
        home: int | None = None,
    ) -> str:
        """The decision for already-hashed prompt blocks (``healthy`` must be non-empty);
        ``home``: :func:`home_key` (defaults to the one of ``keys`` alone)."""
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
        if home is None:
            home = home_key(keys, None)
        if home is None:  # nothing to go by: spread
            self._rr += 1
            home = self._rr
        home_i = self._home_of(home, keep, slots)
        # The best replica holding no prefix is the home or the least loaded one, so only
        # those and the replicas with a match need a cost.
        least = min([loads[i] for i in keep])
        low = home_i if loads[home_i] == least else next(i for i in keep if loads[i] == least)
        costs = {home_i: cfg.load_cost_tokens * loads[home_i] - cfg.home_bonus_tokens}
        costs[low] = min(costs.get(low, math.inf), cfg.load_cost_tokens * loads[low])
        if matched:
            index_of = {slots[i]: i for i in keep}
            for slot, depth in matched.items():
                i = index_of[slot]
                cost = cfg.load_cost_tokens * loads[i] - cfg.block_size * depth
                costs[i] = cost - cfg.home_bonus_tokens if i == home_i else cost
        # Equal costs: a known match first, then the home.
        best = min(costs, key=lambda i: (costs[i], not matched.get(slots[i]), i != home_i))
        reason: Reason
        if matched.get(slots[best], 0):
            reason = "prefix"
        elif best == home_i:
            reason = "home"
        else:
            reason = "load"
        slot = slots[best]
        got = matched.get(slot, 0)
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
