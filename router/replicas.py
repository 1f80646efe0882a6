"""Replica choice within a local target.

v1 is round-robin over healthy replicas; the KV-cache-aware selector implements the same
``ReplicaSelector`` protocol. A selector sees replicas through :class:`ReplicaView` only, and
their ``/metrics`` readings (:class:`ReplicaLoad`) through a :class:`LoadBook`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from operator import not_
from typing import Protocol

from router.features import RequestFeatures


@dataclass(frozen=True, slots=True)
class ReplicaView:
    name: str
    healthy: bool
    in_flight: int = 0


@dataclass(frozen=True, slots=True)
class RoutedPrompt:
    """One routing decision as other gateways of a fleet learn it: the replica chosen, the
    prompt's block keys (chained, from block 0) and the request's home key (None: none)."""

    replica: str
    keys: tuple[int, ...]
    home: int | None


class NoHealthyReplicaError(Exception):
    def __init__(self, target: str) -> None:
        self.target = target
        super().__init__(f"no healthy replica for target `{target}`")


class ReplicaSelector(Protocol):
    def select_replica(
        self, target: str, replicas: Sequence[ReplicaView], features: RequestFeatures
    ) -> str: ...


class RoundRobinSelector:
    """Cycles through healthy replicas, one counter per target."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def select_replica(
        self, target: str, replicas: Sequence[ReplicaView], features: RequestFeatures
    ) -> str:
        healthy = [r for r in replicas if r.healthy]
        if not healthy:
            raise NoHealthyReplicaError(target)
        i = self._next.get(target, 0)
        self._next[target] = i + 1
        return healthy[i % len(healthy)].name


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One replica's ``/metrics`` reading."""

    running: int
    waiting: int
    kv_usage: float
    observed_at: float
    num_blocks: int | None = None
    block_size: int | None = None


class SlotList(list[int]):
    """The slots of one replica list (in its order), memoised by :meth:`LoadBook.slots_of`,
    with what derives from those slots alone, so a decision reads it instead of looping over
    the replicas: their bit mask, slot -> position, and the scraped terms while fresh."""

    __slots__ = ("fresh", "identity", "mask", "position")

    def __init__(self, slots: Sequence[int]) -> None:
        super().__init__(slots)
        self.mask = sum(1 << s for s in set(slots))
        self.position = {s: i for i, s in enumerate(slots)}
        self.identity = list(slots) == list(range(len(slots)))  # slot i at position i
        self.fresh: _FreshReadings | None = None


@dataclass(frozen=True, slots=True)
class _FreshReadings:
    """Scraped terms per position of a :class:`SlotList` (0 where stale or missing), valid
    while no reading changes and no reading crosses the staleness cutoff."""

    version: int
    oldest_fresh: float  # the smallest observed_at counted as fresh (inf: none)
    newest_stale: float  # the largest observed_at counted as stale (-inf: none)
    queued: list[float]
    kv_usage: list[float]
    max_kv_usage: float

    @property
    def any_fresh(self) -> bool:
        return self.oldest_fresh != math.inf

    def valid(self, version: int, cutoff: float) -> bool:
        return (
            version == self.version and self.oldest_fresh >= cutoff and self.newest_stale < cutoff
        )


class LoadBook:
    """Latest :class:`ReplicaLoad` per replica, combined with the gateway's in-flight counts.

    Replicas get small integer slots (also their bit in a prefix index's owner masks);
    readings are kept in per-slot lists, and per replica list the fresh ones are derived once
    per change (:class:`SlotList`), not once per decision.
    """

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self._slots: dict[str, int] = {}
        self._slot_lists: dict[tuple[str, ...], SlotList] = {}
        self._readings: list[ReplicaLoad | None] = []
        self._queued: list[float] = []  # running + waiting, per slot
        self._kv_usage: list[float] = []
        self._seen_at: list[float] = []  # -inf until a reading arrives
        self._version = 0  # bumped by every reading

    def __len__(self) -> int:
        """Replicas known (slots handed out)."""
        return len(self._slots)

    def slot_of(self, name: str) -> int:
        slot = self._slots.get(name)
        if slot is None:
            slot = self._slots[name] = len(self._slots)
            self._readings.append(None)
            self._queued.append(0.0)
            self._kv_usage.append(0.0)
            self._seen_at.append(float("-inf"))
        return slot

    def slots_of(self, views: Sequence[ReplicaView]) -> SlotList:
        """Slots of ``views`` in order (memoised per replica list; bounded)."""
        names = tuple([v.name for v in views])
        slots = self._slot_lists.get(names)
        if slots is None:
            if len(self._slot_lists) > 256:
                self._slot_lists.clear()
            slots = self._slot_lists[names] = SlotList([self.slot_of(n) for n in names])
        return slots

    def names(self) -> dict[str, int]:
        return dict(self._slots)

    def update(self, name: str, load: ReplicaLoad) -> None:
        slot = self.slot_of(name)
        self._readings[slot] = load
        self._queued[slot] = float(load.running + load.waiting)
        self._kv_usage[slot] = load.kv_usage
        self._seen_at[slot] = load.observed_at
        self._version += 1

    def get(self, name: str) -> ReplicaLoad | None:
        slot = self._slots.get(name)
        return None if slot is None else self._readings[slot]

    def _fresh(self, slots: Sequence[int], now: float) -> _FreshReadings:
        cutoff = now - self.stale_after_s
        cached = slots.fresh if isinstance(slots, SlotList) else None
        if cached is not None and cached.valid(self._version, cutoff):
            return cached
        seen = self._seen_at
        fresh = [seen[s] >= cutoff for s in slots]
        usage = [self._kv_usage[s] if f else 0.0 for s, f in zip(slots, fresh, strict=True)]
        readings = _FreshReadings(
            version=self._version,
            oldest_fresh=min(compress(map(seen.__getitem__, slots), fresh), default=math.inf),
            newest_stale=max(
                compress(map(seen.__getitem__, slots), map(not_, fresh)), default=-math.inf
            ),
            queued=[self._queued[s] if f else 0.0 for s, f in zip(slots, fresh, strict=True)],
            kv_usage=usage,
            max_kv_usage=max(usage, default=0.0),
        )
        if isinstance(slots, SlotList):
            slots.fresh = readings
        return readings

    def loads(self, views: Sequence[ReplicaView], slots: Sequence[int], now: float) -> list[float]:
        """``max(in_flight, running + waiting)`` per view; stale readings count as absent."""
        fresh = self._fresh(slots, now)
        in_flight = [float(v.in_flight) for v in views]
        if not fresh.any_fresh:
            return in_flight
        # max(f, q), spelled out: the builtin costs a call per replica.
        return [q if q > f else f for f, q in zip(in_flight, fresh.queued, strict=True)]

    def kv_usages(self, slots: Sequence[int], now: float) -> list[float]:
        """KV cache usage (0..1) per slot; 0 where the reading is stale or missing."""
        return self._fresh(slots, now).kv_usage

    def max_kv_usage(self, slots: Sequence[int], now: float) -> float:
        """The largest of :meth:`kv_usages` (cached with them)."""
        return self._fresh(slots, now).max_kv_usage
