"""Baseline replica selectors and the factory that builds any selector from its config.

Every selector implements ``router.replicas.ReplicaSelector`` (``select_replica``) plus the
optional hooks of :class:`ObservingSelector`, which default to no-ops: ``update_load`` (a fresh
``/metrics`` reading), ``apply_kv_events`` and ``kv_events_lost`` (vLLM KV cache events). The
gateway calls the hooks on whatever selector the config built, without type checks.

- round-robin: cycles through healthy replicas (``router.replicas.RoundRobinSelector``).
- least-load: fewest ``max(in_flight, running + waiting)``; ties rotate.
- session affinity: a consistent-hash ring with ``virtual_nodes`` points per replica; a session
  key maps to the first healthy replica clockwise from its hash, so a replica going down moves
  only its own sessions. Requests without a key are spread round-robin.
- cache-aware: ``router/cache_aware.py``.
"""

from __future__ import annotations

import bisect
import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from router.cache_aware import CacheAwareSelector, LoadBook, ReplicaLoad
from router.features import RequestFeatures
from router.kv_events import KvEvent
from router.replicas import NoHealthyReplicaError, ReplicaSelector, ReplicaView, RoundRobinSelector
from router.selector_config import (
    CacheAwareConfig,
    LeastLoadConfig,
    RoundRobinConfig,
    SelectorConfig,
    SessionAffinityConfig,
)


class ObservingSelector(ReplicaSelector, Protocol):
    """A selector with the observation hooks the gateway feeds."""

    def update_load(self, name: str, load: ReplicaLoad) -> None: ...

    def apply_kv_events(self, name: str, events: Iterable[KvEvent]) -> int: ...

    def kv_events_lost(self, name: str, count: int) -> None: ...


class _IgnoresObservations:
    def update_load(self, name: str, load: ReplicaLoad) -> None:
        return None

    def apply_kv_events(self, name: str, events: Iterable[KvEvent]) -> int:
        return 0

    def kv_events_lost(self, name: str, count: int) -> None:
        return None


class RoundRobin(_IgnoresObservations, RoundRobinSelector):
    """Round-robin with the (ignored) observation hooks."""


class LeastLoadSelector(_IgnoresObservations):
    def __init__(self, config: LeastLoadConfig, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self._clock = clock
        self.load_book = LoadBook(config.load.stale_after_s)
        self._turn = 0

    def update_load(self, name: str, load: ReplicaLoad) -> None:
        self.load_book.update(name, load)

    def select_replica(
        self, target: str, replicas: Sequence[ReplicaView], features: RequestFeatures
    ) -> str:
        healthy = [v for v in replicas if v.healthy]
        if not healthy:
            raise NoHealthyReplicaError(target)
        slots = self.load_book.slots_of(healthy)
        loads = self.load_book.loads(healthy, slots, self._clock())
        low = min(loads)
        tied = [v for v, load in zip(healthy, loads, strict=True) if load == low]
        self._turn += 1
        return tied[self._turn % len(tied)].name


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Consistent-hash ring of replica names, ``virtual_nodes`` points each."""

    def __init__(self, names: Iterable[str], virtual_nodes: int) -> None:
        points = sorted(
            (_hash64(f"{name}#{i}"), name) for name in set(names) for i in range(virtual_nodes)
        )
        self._hashes = [h for h, _ in points]
        self._names = [n for _, n in points]

    def lookup(self, key: str, allowed: set[str]) -> str | None:
        """The first name clockwise from ``key``'s hash that is in ``allowed``."""
        if not self._hashes:
            return None
        start = bisect.bisect_left(self._hashes, _hash64(key))
        n = len(self._hashes)
        for step in range(n):
            name = self._names[(start + step) % n]
            if name in allowed:
                return name
        return None


class SessionAffinitySelector(_IgnoresObservations):
    def __init__(self, config: SessionAffinityConfig) -> None:
        self.config = config
        self._ring: HashRing | None = None
        self._ring_names: frozenset[str] = frozenset()
        self._fallback = RoundRobinSelector()

    def _key(self, features: RequestFeatures) -> str | None:
        if self.config.key == "episode":
            return features.episode_id or features.api_key_id
        return features.api_key_id

    def select_replica(
        self, target: str, replicas: Sequence[ReplicaView], features: RequestFeatures
    ) -> str:
        key = self._key(features)
        if key is None:
            return self._fallback.select_replica(target, replicas, features)
        # The ring holds every configured replica, healthy or not, so that a replica's
        # sessions come back to it when it recovers.
        names = frozenset(v.name for v in replicas)
        if self._ring is None or names != self._ring_names:
            self._ring = HashRing(names, self.config.virtual_nodes)
            self._ring_names = names
        chosen = self._ring.lookup(key, {v.name for v in replicas if v.healthy})
        if chosen is None:
            raise NoHealthyReplicaError(target)
        return chosen


def build_selector(
    config: SelectorConfig, clock: Callable[[], float] = time.monotonic
) -> ObservingSelector:
    """The selector a config describes."""
    if isinstance(config, RoundRobinConfig):
        return RoundRobin()
    if isinstance(config, LeastLoadConfig):
        return LeastLoadSelector(config, clock)
    if isinstance(config, SessionAffinityConfig):
        return SessionAffinitySelector(config)
    if isinstance(config, CacheAwareConfig):
        return CacheAwareSelector(config, clock)
    raise TypeError(f"unknown selector config {type(config).__name__}")
