"""Replica choice within a local target.

v1 is round-robin over healthy replicas; the KV-cache-aware selector implements the same
``ReplicaSelector`` protocol. A selector sees replicas through :class:`ReplicaView` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from router.features import RequestFeatures


@dataclass(frozen=True, slots=True)
class ReplicaView:
    name: str
    healthy: bool
    in_flight: int = 0


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
