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
construction (once full, about 340 bytes per indexed block in precise mode's event-fed index,
about 150 in approximate mode's prompt tree, up to ~420 when every prompt branches off the
previous one a block apart). A block can only be reused if all
blocks before it are (chained hashes), so every replica's longest cached prefix is found in one
pass over the prompt's blocks, or, on an index fed whole prompts (below), by bisection.

- approximate mode: when a request is routed, its prompt blocks are recorded on the chosen
  replica, deepest block first, so the first blocks are the most recent and the LRU evicts a
  prefix from its tail as vLLM does (it frees a request's blocks tail first). This index only
  ever receives whole prompts, so it is a :class:`~router.prefix_index.PromptIndex` (the same
  LRU kept as a tree: recording a prompt costs its new blocks, not all of them); KV events are
  not applied in this mode.
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
   load(r) - home_bonus_tokens * [r is the request's remembered home]``: a replica must save
   ``load_cost_tokens`` prefill tokens per extra request it holds. Equal costs prefer a known
   match, then the home.
4. The *home key* (:func:`home_key`) is the request's session (``episode_id``) if it names one,
   else the block at the largest power-of-two depth at most half the prompt (past a shared
   system prompt; the same for a conversation's turns until its prompt doubles). Its *home* is
   the replica its last request went to (remembered per key, two generations of at most 65,536
   keys). When the index knows nothing useful about a known key (the approximate index has
   evicted what vLLM may still hold) the request goes home unless home is more than
   ``home_bonus_tokens / load_cost_tokens`` requests busier: a session stays on one replica like
   session affinity, and a replica set change moves only the sessions of the replicas that
   left. A key not seen lately gets no bonus: its first request goes where the cost is lowest,
   which for a prompt nothing holds is the least loaded replica; ties go to the replica that
   received the fewest recent requests (the share guard's counts), then to the rendezvous
   (highest-random-weight) winner for the key. Sessions then spread evenly, and so do their
   contexts, which share the replicas' KV capacity.
5. A fleet of gateways shares one picture: every decision is handed to ``on_routed`` (a
   :class:`~router.replicas.RoutedPrompt`) and the other gateways apply it with
   :meth:`CacheAwareSelector.apply_routed` (index blocks, home, share count), as if they had
   routed it; so a session's next turn finds its home and its prefix through any gateway.

Why the defaults (``router/selector_config.py``; swept with ``loadtests/replica_sim.py``):

- ``load_cost_tokens = 128``. The greedy TTFT-optimal weight is a request's mean service time in
  prefill-token units (~1000 in the simulator); a miss also adds its whole prefill to the queue
  of every request behind it, which the greedy weight ignores. Below ~256 the hit rate holds up
  near saturation (at 8-10x load, p90 2-3x better than with 512-1024); elsewhere within 10%.
- ``balance_abs_threshold = 16``, ``balance_rel_threshold = 1.5``: SGLang uses 64 / 1.5 for GPU
  batch sizes; 16 is a CPU replica's batch. Smaller gaps are the cost term's business.
- ``max_share_ratio = 1.2`` over ``share_window_per_replica = 128`` requests: bounds max/mean
  requests per replica near 1.25 for a few points of hit rate; once the window is full,
  counting noise (1/sqrt(128), 9%) is well inside the 20% margin. ``share_noise_sd = 1.5``
  covers the windows that are not full yet: the guard then allows ``1 + 1.5 / sqrt(mean)``
  times the mean, which stays within 1.25 once a replica's share of the window holds 36
  requests. At 2 (an earlier default) it needed 64, more than a 64-replica fleet's window held
  in the simulation (~52 requests per replica): max/mean requests reached 1.26-1.30 there,
  1.19-1.20 at 1.5, for 0.7-0.9 points of hit rate (72.1-72.4% against 72.8-73.2%; session
  affinity 70.1%); at 8 replicas 1.09-1.20 (was 1.20-1.25), two replicas unchanged.
- ``home_bonus_tokens = 256``: two requests of load at ``load_cost_tokens``; a session keeps its
  replica through the small load differences of a moderately loaded fleet, while a replica
  that is really busier still sheds new work. (On the real bench without it, 20 of 113
  continuing turns changed replica, most with nothing left in the index and one to a few
  requests of load difference, while vLLM still held part of their context.) A new key has no
  context anywhere to keep: with the bonus it queued behind one or two requests at its
  rendezvous home while other replicas were idle. In the 64-replica simulation at its lightest
  load, where a quarter of the requests are cold misses no routing avoids and set TTFT p90,
  placing new keys by load (then fewest recent requests) cut the slowest tenth's queued
  requests from 149 to 73 and the avoidable cold misses from 155 to 37 (session affinity: 128
  and 82); TTFT p90 178 ms against session affinity's 182 ms (164 ms with no queueing at all).
- ``kv_usage_limit = 0.98``: vLLM's usage counts blocks held by running requests only (cached
  free blocks do not count), so near 1.0 a new request waits for memory.
- ``capacity_fraction = 0.9``: some blocks always belong to running requests' fresh tokens.
- ``pending_ttl_s = 10``: longer than a prefill waits in a saturated replica's queue.

Cost per request at 64 replicas on this project's 2-core box with nothing else running
(``make bench-kv --skip-real``: ``sim_decision_us`` on the simulation's own prompts,
``selector_cost`` on synthetic ones): the choice 42-50 us at p50 and 104-130 us at p99 (a few
list passes over the replicas, a bisecting prefix match, and only the new blocks recorded, as
one run; the p99 is a prompt the chosen replica holds none of: ~110 blocks recorded and as many
evicted, ~0.25 us each in the owner masks); hashing ~80-90 us per ~115-block prompt at p50,
of which ~3-7 us per new block (SHA-256) and the rest reading the prompt's tokens once: a
session's previous prompt is recognised by one keyed hash of its bytes and not hashed again
(``router/block_hash.py``).
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
from router.prefix_index import (
    INDEX_BYTES_PER_BLOCK,
    PROMPT_INDEX_BYTES_PER_BLOCK,
    PrefixIndex,
    match_lengths,
)
from router.prompt_index import PromptIndex
from router.replicas import (
    LoadBook,
    NoHealthyReplicaError,
    ReplicaLoad,
    ReplicaView,
    RoutedPrompt,
    SlotList,
)
from router.selector_config import CacheAwareConfig

__all__ = [
    "INDEX_BYTES_PER_BLOCK",
    "PROMPT_INDEX_BYTES_PER_BLOCK",
    "CacheAwareSelector",
    "LoadBook",
    "PrefixIndex",
    "PromptIndex",
    "ReplicaLoad",
    "Selection",
    "home_key",
    "match_lengths",
]

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_GOLDEN64 = 0x9E37_79B9_7F4A_7C15
_HOME_MEMO = 65_536  # home keys remembered per generation (about 100 B each)


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
        self.index: PrefixIndex | PromptIndex = (
            PrefixIndex(config.max_index_blocks, config.max_index_blocks)
            if precise
            else PromptIndex(config.default_capacity_blocks, config.max_index_blocks)
        )
        self.pending: PromptIndex | None = (
            PromptIndex(
                config.default_capacity_blocks, config.max_index_blocks, config.pending_ttl_s
            )
            if precise
            else None
        )
        self._salts: list[int] = []
        self._tally: list[float] = []
        self._unit = 1.0
        self._rr = 0
        # Home key -> slot its last request went to; two generations of at most _HOME_MEMO.
        self._homes: dict[int, int] = {}
        self._homes_old: dict[int, int] = {}
        self.last: Selection | None = None
        self.on_routed: Callable[[RoutedPrompt], None] | None = None  # fleet sharing (5.)
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
        """Hook for the KV event subscriber (precise mode); returns events applied (none in
        approximate mode, whose index models the caches from routed prompts alone)."""
        if not isinstance(self.index, PrefixIndex):
            return 0
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
    def _guard(self, loads: list[float], slots: SlotList, now: float) -> tuple[set[int], str]:
        """Indexes (into ``slots``) the guards remove, and which guards removed some. Each
        guard first checks, on aggregates (min, max, sum), whether it removes any: usually
        none or a few replicas are removed, so the rest of the decision works on the few."""
        cfg = self.config
        n = len(slots)
        removed: set[int] = set()
        guarded = []
        low = min(loads)
        bound = max(low + cfg.balance_abs_threshold, low * cfg.balance_rel_threshold)
        if max(loads) > bound:
            removed = {i for i, load in enumerate(loads) if load > bound}
            guarded.append("imbalance")
        if cfg.max_share_ratio is not None and n > 1:
            tally = self._tally
            tallies = tally if slots.identity and len(tally) == n else [tally[s] for s in slots]
            total = sum(tallies)
            # In requests: the window's mean per replica, and a fair random split's spread.
            mean = total / n / self._unit
            spread = math.sqrt(mean * (1.0 - 1.0 / n))
            cap = max(cfg.max_share_ratio * mean, mean + cfg.share_noise_sd * spread)
            # Only once the window holds a couple of requests per replica.
            limit = cap * self._unit
            if mean >= 2.0 and max(tallies) > limit:
                over = [i for i, t in enumerate(tallies) if t > limit and i not in removed]
                if len(over) < n - len(removed):
                    # An over-share replica less busy than every replica within its share is
                    # faster, not hogging a hot prefix: sending its requests to a busier
                    # replica would only queue them.
                    least = low
                    if removed or min([loads[i] for i in over]) <= low:
                        least = min(
                            [
                                x
                                for i, x in enumerate(loads)
                                if tallies[i] <= limit and i not in removed
                            ]
                        )
                    dropped = {i for i in over if loads[i] >= least}
                    if dropped:
                        removed |= dropped
                        guarded.append("share")
        if self.load_book.max_kv_usage(slots, now) > cfg.kv_usage_limit:
            usage = self.load_book.kv_usages(slots, now)
            full = {i for i, u in enumerate(usage) if u > cfg.kv_usage_limit and i not in removed}
            if full and len(full) < n - len(removed):
                removed |= full
                guarded.append("kv_usage")
        return removed, ",".join(guarded)

    def _remembered(self, key: int, slots: SlotList, removed: set[int]) -> int:
        """The index (into ``slots``) of the replica ``key``'s last request went to, or -1:
        a key not seen lately, or whose replica is gone or removed by a guard."""
        slot = self._homes.get(key)
        if slot is None:
            slot = self._homes_old.get(key)
            if slot is None:
                return -1
        i = slots.position.get(slot, -1)
        return -1 if i in removed else i

    def _least_loaded(
        self, key: int, removed: set[int], loads: list[float], least: float, slots: SlotList
    ) -> int:
        """The least loaded index not ``removed``; ties go to the replica that received the
        fewest recent requests (the share tallies), then to the :func:`rendezvous` winner for
        ``key``."""
        tied = [i for i, load in enumerate(loads) if load == least and i not in removed]
        if len(tied) > 1:
            tally = self._tally
            fewest = min([tally[slots[i]] for i in tied])
            tied = [i for i in tied if tally[slots[i]] == fewest]
        return self._rendezvous_best(key, tied, slots)

    def _rendezvous_best(self, key: int, keep: Iterable[int], slots: Sequence[int]) -> int:
        """The index in ``keep`` with the highest :func:`rendezvous` score for ``key``
        (inlined: it runs for every candidate)."""
        salts = self._salts
        best, best_score = -1, -1
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
        keys = self.hasher.block_keys(tokens, features.episode_id) if tokens else []
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
        book = self.load_book
        slots = book.slots_of(healthy)
        if len(self._tally) < len(book):
            for name in book.names():
                self.slot_of(name)
        loads = book.loads(healthy, slots, now)
        removed, guarded = self._guard(loads, slots, now)
        indexes = [self.index]
        if self.pending is not None:
            self.pending.expire(now)
            indexes.append(self.pending)
        candidates = slots.mask
        for i in removed:
            candidates &= ~(1 << slots[i])
        matched = match_lengths(keys, candidates, indexes) if keys else {}
        if home is None:
            home = home_key(keys, None)
        known = home is not None
        if home is None:  # nothing to go by: spread
            self._rr += 1
            home = self._rr
        least = min([x for i, x in enumerate(loads) if i not in removed]) if removed else min(loads)
        home_i = self._remembered(home, slots, removed) if known else -1
        bonus = cfg.home_bonus_tokens
        if home_i < 0:  # a new key: its home is where load alone sends it
            home_i = self._least_loaded(home, removed, loads, least, slots)
            bonus = 0.0
        costs = {home_i: cfg.load_cost_tokens * loads[home_i] - bonus}
        position = slots.position
        for slot, depth in matched.items():
            i = position[slot]
            cost = cfg.load_cost_tokens * loads[i] - cfg.block_size * depth
            costs[i] = cost - bonus if i == home_i else cost
        # Any other replica costs at least `load_cost * least` and loses ties (equal costs: a
        # known match first, then the home): only a least loaded one can win, if cheaper.
        if cfg.load_cost_tokens * least < min(costs.values()):
            costs[self._least_loaded(home, removed, loads, least, slots)] = (
                cfg.load_cost_tokens * least
            )
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
        if known:  # the key's home is where its last request went
            self._remember_home(home, slot)
        self._record_share(slot, len(healthy))
        self.last = Selection(healthy[best].name, got, len(keys), loads[best], reason, guarded)
        if self.on_routed is not None:
            self.on_routed(RoutedPrompt(healthy[best].name, tuple(keys), home if known else None))
        return healthy[best].name

    def _remember_home(self, home: int, slot: int) -> None:
        self._homes[home] = slot
        if len(self._homes) >= _HOME_MEMO:
            self._homes_old, self._homes = self._homes, {}

    def apply_routed(self, routed: RoutedPrompt) -> None:
        """Hook for the fleet: another gateway sent ``routed`` to one of these replicas."""
        slot = self.slot_of(routed.replica)
        if routed.keys:
            index = self.pending if self.pending is not None else self.index
            index.add_blocks(slot, routed.keys, self._clock())
        if routed.home is not None:
            self._remember_home(routed.home, slot)
        self._record_share(slot, len(self.load_book))

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
