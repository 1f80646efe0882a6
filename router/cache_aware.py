"""KV-cache-aware replica choice: send a request where its prompt prefix is already cached, unless
that replica is busier than the saving is worth, and never let one replica run away.

Inputs: the prompt's token ids (``RequestFeatures.prompt_token_ids``, tokenized as vLLM will) as
vLLM's chained block hashes (``router/block_hash.py``); per replica, the gateway's in-flight count
(``ReplicaView``) and its last ``/metrics`` (:class:`ReplicaLoad`). The prefix index
(``router/prefix_index.py``) maps block key -> replicas holding it, one LRU per replica of
``min(max_index_blocks, capacity_fraction * num_gpu_blocks)`` blocks (bounded memory); hashes
chain, so a replica's longest cached prefix is one pass over the prompt's blocks.
- approximate mode: a routed prompt is recorded on its replica deepest block first, so the LRU
  evicts a prefix from its tail as vLLM does (:class:`~router.prefix_index.PromptIndex`).
- precise mode: the index holds vLLM's KV cache events (``router/kv_events.py``); routed prefixes
  wait in a *pending* index for ``pending_ttl_s``, until their event; a replica whose events are
  lost for good has its index dropped and refilled (:meth:`CacheAwareSelector.kv_events_lost`).

The decision, for the healthy replicas ``R``:
1. ``load = max(in_flight, running + waiting)``; a reading past ``load.stale_after_s`` is ignored.
2. Guards, each skipped when it would remove every replica: *imbalance* (``load > m +
   balance_abs_threshold`` and ``load > m * balance_rel_threshold``, ``m`` the least load);
   *share* (over ``max_share_ratio`` x the mean share of the last ``share_window_per_replica *
   |R|`` requests and over the mean plus ``share_noise_sd`` sd of a fair split, unless less
   loaded than every replica within its share); *memory* (KV usage over ``kv_usage_limit``).
3. Minimise ``cost(r) = uncached_tokens(r) + load_cost_tokens * load(r) - home_bonus_tokens *
   [r is home]``; equal costs prefer a known match, then home.
4. Home: where the last request of the *home key* went (:func:`home_key`: the ``episode_id``,
   else the block at the largest power-of-two depth <= half the prompt). An unseen key gets no
   bonus; its ties go to the fewest recent requests, then to the key's rendezvous winner.
5. Every decision goes to ``on_routed``; the fleet's other gateways apply it (``apply_routed``).

Defaults (``router/selector_config.py``), each for a reason:
- ``load_cost_tokens = 128``: under ~256 hits hold up near saturation (a miss delays its queue).
- ``balance_abs_threshold = 16``, ``balance_rel_threshold = 1.5``: SGLang's 64 / 1.5, CPU batch.
- ``max_share_ratio = 1.2`` over ``share_window_per_replica = 128``: max/mean requests ~1.25.
- ``share_noise_sd = 1.5``: a window not yet full trips the share guard on skew, not on noise.
- ``home_bonus_tokens = 256``: two requests of load; a session outlasts small load differences.
- ``kv_usage_limit = 0.98``: vLLM counts running requests' blocks only; near 1.0 a request waits.
- ``capacity_fraction = 0.9``: running requests' fresh tokens always hold some blocks.
- ``pending_ttl_s = 10``: longer than a prefill waits in a saturated replica's queue.
Sweeps, cost per decision, memory per block: docs/kv_routing.md, "Why the defaults: the sweeps".
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
