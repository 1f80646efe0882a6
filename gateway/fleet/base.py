"""The fleet interface every gateway process talks to, and its in-process implementation.

:class:`Fleet` is what the admin API, reloads and the applier use; :class:`LocalFleet` is the
fleet of one process (``fleet.backend: local``, no Redis), :class:`~gateway.fleet.redis_fleet.
RedisFleet` the shared one. Both deliver every snapshot to the same ``apply`` callback
(:class:`~gateway.routing.reload.Reloader`), so one gateway and a fleet of them run one code
path.

Console sessions ended by a logout are revoked through the fleet too
(:meth:`Fleet.revoke_session`, :meth:`Fleet.session_revoked`): each revocation is kept for the
session's remaining lifetime only (past it the cookie has expired anyway).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.fleet.snapshot import FleetChange, FleetSnapshot, apply_change
from router.selectors import ObservingSelector

KEPT_DRAINS = 64  # drain reports kept (the newest); a drain is waited on for seconds

ApplyFn = Callable[[FleetSnapshot], Awaitable[None]]


def new_member_id() -> str:
    """This process's name in the fleet: host, pid and a random suffix (a restarted process
    with a recycled pid is a new member)."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class Fleet(Protocol):
    """Shared state of the gateway processes that form one fleet."""

    @property
    def member_id(self) -> str: ...

    @property
    def shared(self) -> bool:
        """Whether other processes may see what this one publishes."""
        ...

    async def start(self, apply: ApplyFn, seed: FleetSnapshot) -> None:
        """Join: apply the fleet's snapshot, or make ``seed`` the fleet's when it has none.
        Returns once this process serves the fleet's state (or it is unreachable: then it
        serves ``seed`` and keeps trying)."""

    async def publish(self, change: FleetChange) -> FleetSnapshot:
        """Make ``change`` the fleet's; returns the snapshot this process now serves (which
        includes it). Raises :class:`~gateway.errors.ServiceUnavailableError` when the fleet
        cannot be reached (nothing changed)."""
        ...

    async def ack_drain(self, drain_id: str, in_flight: int) -> None:
        """Report this process's requests still in flight on the replica drain ``drain_id``."""

    async def drain_acks(self, drain_id: str) -> dict[str, int]:
        """Members' reports on ``drain_id``, by member id."""
        ...

    async def lead(self, role: str, ttl_s: float) -> bool:
        """Whether this member holds ``role``'s lease (taken or renewed for ``ttl_s``): one member
        of the fleet does a fleet-wide chore (the console's roll-ups); when it dies another one
        takes the role over once its lease ran out."""
        ...

    async def live_members(self) -> list[str]:
        """The members heard from lately (this one included)."""
        ...

    async def revoke_session(self, session_id: str, ttl_s: float) -> None:
        """End the console session ``session_id`` for every member, for ``ttl_s`` (its remaining
        lifetime). Raises :class:`~gateway.errors.ServiceUnavailableError` when the fleet cannot
        be reached (nothing was revoked)."""

    async def session_revoked(self, session_id: str) -> bool:
        """Whether ``session_id`` was revoked (and its revocation has not lapsed). Raises
        :class:`~gateway.errors.ServiceUnavailableError` when the fleet cannot be reached: the
        caller must not take that for "not revoked"."""
        ...

    def share_routing(self, target: str, selector: ObservingSelector) -> None:
        """Share a local target's cache-aware decisions with the other members."""

    def stats(self) -> dict[str, float]:
        """Gauges for ``/metrics`` (``state_stale``: 1 while serving on last known state)."""
        ...

    async def aclose(self) -> None: ...


class LocalFleet:
    """The fleet of this process alone: publishing applies at once; nothing is shared."""

    shared = False

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._member_id = new_member_id()
        self._apply: ApplyFn | None = None
        self._snapshot = FleetSnapshot()
        self._acks: dict[str, dict[str, int]] = {}
        self._clock = clock
        self._revoked: dict[str, float] = {}  # session id -> until when (clock)

    @property
    def member_id(self) -> str:
        return self._member_id

    async def start(self, apply: ApplyFn, seed: FleetSnapshot) -> None:
        self._apply = apply
        self._snapshot = seed

    async def publish(self, change: FleetChange) -> FleetSnapshot:
        self._snapshot = apply_change(self._snapshot, change)
        if self._apply is not None:
            await self._apply(self._snapshot)
        return self._snapshot

    async def ack_drain(self, drain_id: str, in_flight: int) -> None:
        self._acks.setdefault(drain_id, {})[self._member_id] = in_flight
        while len(self._acks) > KEPT_DRAINS:
            del self._acks[next(iter(self._acks))]

    async def drain_acks(self, drain_id: str) -> dict[str, int]:
        return dict(self._acks.get(drain_id, {}))

    async def live_members(self) -> list[str]:
        return [self._member_id]

    async def lead(self, role: str, ttl_s: float) -> bool:
        return True  # the only member

    async def revoke_session(self, session_id: str, ttl_s: float) -> None:
        now = self._clock()
        for lapsed in [sid for sid, until in self._revoked.items() if until <= now]:
            del self._revoked[lapsed]
        self._revoked[session_id] = now + ttl_s

    async def session_revoked(self, session_id: str) -> bool:
        until = self._revoked.get(session_id)
        return until is not None and until > self._clock()

    def share_routing(self, target: str, selector: ObservingSelector) -> None:
        return None

    def stats(self) -> dict[str, float]:
        return {"state_stale": 0.0, "revision": float(self._snapshot.revision), "members": 1.0}

    async def aclose(self) -> None:
        return None
