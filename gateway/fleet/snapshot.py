"""The fleet's shared state as values: what every gateway applies, and a change to it.

A :class:`FleetSnapshot` is the whole truth at one ``revision`` (a counter bumped by every
change): the routing document (the config sections a reload changes, with the learned state
fitted for them) and its version, the canary and its version, and per replica its operator
controls (drained, weights version). Gateways apply a snapshot as one step (see
:mod:`gateway.routing.reload`), so a decision sees one routing version and one canary, never a
mix.

The routing document carries the config sections ``backends``, ``routing`` and ``shadow`` and the
learned state as JSON: a gateway on another host needs neither the reloaded file nor the state
file. The other sections (listening, store, auth, telemetry, fleet) stay each process's own:
they hold addresses and credentials that never go to Redis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

ROUTING_SECTIONS: Final = ("backends", "routing", "shadow")


@dataclass(frozen=True, slots=True)
class RoutingDoc:
    """The routing sections of a config and the learned state fitted for them."""

    sections: dict[str, Any]
    learned: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CanaryDoc:
    """A candidate routing section deciding ``share`` of the requests (with its own learned
    state when it names another state file); a release's weights, later stages, pause and
    shadow stage (:class:`gateway.routing.table.Canary`)."""

    routing: dict[str, Any]
    share: float
    learned: dict[str, Any] | None = None
    weights: str | None = None
    schedule: tuple[float, ...] = ()
    paused: bool = False
    shadow: float = 0.0


@dataclass(frozen=True, slots=True)
class ReplicaControl:
    """What operators set on a replica: out of rotation, and the weights it serves.

    ``drain_id`` names the drain that took it out (every gateway reports its requests still in
    flight there under that id, :meth:`gateway.fleet.base.Fleet.ack_drain`)."""

    drained: bool = False
    weights_version: str | None = None
    drain_id: str | None = None
    drain_timeout_s: float = 0.0


def replica_key(target: str, url: str) -> str:
    return f"{target}|{url.rstrip('/')}"


def split_replica_key(key: str) -> tuple[str, str]:
    target, _, url = key.partition("|")
    return target, url


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """The fleet's state at ``revision``; ``epoch`` names the lineage of revisions (a Redis that
    lost its data is seeded again under a new epoch, which every member applies)."""

    revision: int = 0
    epoch: str = ""
    routing: RoutingDoc | None = None
    routing_version: int = 0
    canary: CanaryDoc | None = None
    canary_version: int = 0
    replicas: Mapping[str, ReplicaControl] = field(default_factory=dict)


class _Clear:
    """The canary is dropped (``FleetChange.canary = CLEAR``)."""


CLEAR: Final = _Clear()


@dataclass(frozen=True, slots=True)
class FleetChange:
    """One atomic change: any of a new routing document, a canary set or cleared, replica
    controls (replacing those replicas' controls whole)."""

    routing: RoutingDoc | None = None
    canary: CanaryDoc | _Clear | None = None
    replicas: Mapping[str, ReplicaControl] = field(default_factory=dict)


def apply_change(snapshot: FleetSnapshot, change: FleetChange) -> FleetSnapshot:
    """The snapshot after ``change`` (what the Redis script computes, for the local fleet)."""
    canary, canary_version = snapshot.canary, snapshot.canary_version
    if change.canary is not None:
        canary = None if isinstance(change.canary, _Clear) else change.canary
        canary_version += 1
    return FleetSnapshot(
        revision=snapshot.revision + 1,
        epoch=snapshot.epoch,
        routing=change.routing or snapshot.routing,
        routing_version=snapshot.routing_version + (change.routing is not None),
        canary=canary,
        canary_version=canary_version,
        replicas={**snapshot.replicas, **change.replicas},
    )


# Wire encoding (Redis hash fields), kept next to the values.


def encode_routing(doc: RoutingDoc) -> bytes:
    return orjson.dumps({"sections": doc.sections, "learned": doc.learned})


def decode_routing(raw: bytes) -> RoutingDoc:
    data = orjson.loads(raw)
    return RoutingDoc(data["sections"], data.get("learned"))


def encode_canary(doc: CanaryDoc | _Clear) -> bytes:
    if isinstance(doc, _Clear):
        return b"null"
    return orjson.dumps(
        {
            "routing": doc.routing,
            "share": doc.share,
            "learned": doc.learned,
            "weights": doc.weights,
            "schedule": list(doc.schedule),
            "paused": doc.paused,
            "shadow": doc.shadow,
        }
    )


def decode_canary(raw: bytes) -> CanaryDoc | None:
    data = orjson.loads(raw)
    if data is None:
        return None
    return CanaryDoc(
        data["routing"],
        float(data["share"]),
        data.get("learned"),
        data.get("weights"),
        tuple(float(x) for x in data.get("schedule") or ()),
        bool(data.get("paused", False)),
        float(data.get("shadow") or 0.0),
    )


def encode_replica(control: ReplicaControl) -> bytes:
    return orjson.dumps(
        {
            "drained": control.drained,
            "weights_version": control.weights_version,
            "drain_id": control.drain_id,
            "drain_timeout_s": control.drain_timeout_s,
        }
    )


def decode_replica(raw: bytes) -> ReplicaControl:
    data = orjson.loads(raw)
    return ReplicaControl(
        bool(data["drained"]),
        data.get("weights_version"),
        data.get("drain_id"),
        float(data.get("drain_timeout_s") or 0.0),
    )
