"""The fleet shared through Redis: one hash holds the truth, pub/sub says when it changed.

Keys (``N`` = ``fleet.name``):

    N:state          hash: rev, epoch, routing, routing_version, canary, canary_version,
                     replica:<target>|<url> (JSON each; see gateway.fleet.snapshot)
    N:changes        channel: the new revision, published by the script that made it
    N:routed         channel: batches of cache-aware decisions (gateway.fleet.routed_feed)
    N:members        sorted set: member id -> last heartbeat (unix seconds)
    N:member:<id>    hash: host, pid, applied ("<epoch>:<revision>" it serves, written after
                     each apply); expires with the member
    N:drain:<id>     hash: member id -> requests still in flight on that drain (expires)
    N:session-revoked:<sid>  a console session ended by a logout; expires with the session

A change is one Lua script (bump ``rev``, write the parts, publish): atomic, so a reader's
``HGETALL`` sees a whole revision. Each member applies a revision when the notification arrives,
and also reads ``rev`` every ``poll_interval_s`` (a notification lost while reconnecting delays
a change by at most that). The member that made the change answers once every live member says
it serves that revision (``applied``), or after ``apply_wait_s`` (logged, naming the laggards).
An empty hash (a new fleet, or a Redis that lost its data) is seeded by the first member that
finds it so, with its own state under a new epoch.

Redis unreachable: the member keeps serving its last applied snapshot, sets ``stale`` (the
``switchyard_fleet_state_stale`` gauge) and logs once per outage; it reconnects every
``retry_s`` and applies whatever changed meanwhile. Publishing answers 503 meanwhile (a change
that would reach one process only is refused, not half-made), and so do a logout's revocation
and the check of a console session (the console then refuses cookie sessions: fail closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from collections.abc import Mapping
from typing import Any, Final

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gateway.errors import ServiceUnavailableError
from gateway.fleet.base import ApplyFn, new_member_id
from gateway.fleet.config import FleetConfig
from gateway.fleet.routed_feed import RoutedFeed
from gateway.fleet.snapshot import (
    CLEAR,
    FleetChange,
    FleetSnapshot,
    decode_canary,
    decode_replica,
    decode_routing,
    encode_canary,
    encode_replica,
    encode_routing,
)
from router.selectors import ObservingSelector

log = logging.getLogger(__name__)

DRAIN_REPORT_TTL_S: Final = 600
APPLY_POLL_S: Final = 0.01
_REPLICA_FIELD: Final = "replica:"

# KEYS: state. ARGV: channel, routing ('' = unchanged), canary ('' = unchanged), epoch-if-new,
# then replica field/value pairs. Returns the new revision.
_PUBLISH_LUA: Final = """
if redis.call('HEXISTS', KEYS[1], 'epoch') == 0 then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[4])
end
local rev = redis.call('HINCRBY', KEYS[1], 'rev', 1)
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'routing', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'routing_version', 1)
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'canary', ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'canary_version', 1)
end
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], 'replica:' .. ARGV[i], ARGV[i + 1])
end
redis.call('PUBLISH', ARGV[1], rev)
return rev
"""

# KEYS: state. ARGV: channel, epoch, then field/value pairs of a whole snapshot. Writes them
# only into an empty hash; returns 1 if it did.
_SEED_LUA: Final = """
if redis.call('HEXISTS', KEYS[1], 'rev') == 1 then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'epoch', ARGV[2])
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('PUBLISH', ARGV[1], redis.call('HGET', KEYS[1], 'rev'))
return 1
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value


def decode_snapshot(raw: Mapping[bytes | str, bytes | str]) -> FleetSnapshot | None:
    """A snapshot from the state hash; None when the hash holds none."""
    fields = {_text(k): _bytes(v) for k, v in raw.items()}
    if "rev" not in fields:
        return None
    replicas = {
        name.removeprefix(_REPLICA_FIELD): decode_replica(value)
        for name, value in fields.items()
        if name.startswith(_REPLICA_FIELD)
    }
    return FleetSnapshot(
        revision=int(fields["rev"]),
        epoch=fields.get("epoch", b"").decode(),
        routing=decode_routing(fields["routing"]) if "routing" in fields else None,
        routing_version=int(fields.get("routing_version", b"0")),
        canary=decode_canary(fields["canary"]) if "canary" in fields else None,
        canary_version=int(fields.get("canary_version", b"0")),
        replicas=replicas,
    )


def _mark(snapshot: FleetSnapshot) -> str:
    return f"{snapshot.epoch}:{snapshot.revision}"


def _serves(mark: bytes | str | None, snapshot: FleetSnapshot) -> bool:
    """Whether a member's applied mark is ``snapshot``'s revision or newer (same epoch)."""
    if mark is None:
        return False
    epoch, _, revision = _text(mark).rpartition(":")
    return epoch == snapshot.epoch and int(revision) >= snapshot.revision


def _snapshot_fields(snapshot: FleetSnapshot) -> list[bytes | str]:
    """A snapshot as the state hash's fields (for seeding), revision at least 1."""
    out: list[bytes | str] = [
        "rev",
        str(max(1, snapshot.revision)),
        "routing_version",
        str(max(1, snapshot.routing_version)),
        "canary_version",
        str(snapshot.canary_version),
    ]
    if snapshot.routing is not None:
        out += ["routing", encode_routing(snapshot.routing)]
    out += ["canary", encode_canary(snapshot.canary if snapshot.canary is not None else CLEAR)]
    for key, control in snapshot.replicas.items():
        out += [_REPLICA_FIELD + key, encode_replica(control)]
    return out


class RedisFleet:
    """:class:`~gateway.fleet.base.Fleet` over Redis (see the module docstring)."""

    shared = True

    def __init__(self, config: FleetConfig, client: aioredis.Redis | None = None) -> None:
        self._config = config
        self._member_id = new_member_id()
        self._redis = client or aioredis.Redis(
            connection_pool=aioredis.ConnectionPool.from_url(
                config.redis_url,
                socket_timeout=config.timeout_s,
                socket_connect_timeout=config.timeout_s,
                retry=Retry(NoBackoff(), 0),  # one timeout at most; the loop reconnects
            )
        )
        ns = config.name
        self._state_key = f"{ns}:state"
        self._changes = f"{ns}:changes"
        self._routed_channel = f"{ns}:routed"
        self._members_key = f"{ns}:members"
        self._info_key = f"{ns}:member:{self._member_id}"
        self._ns = ns
        self._publish_script = self._redis.register_script(_PUBLISH_LUA)
        self._seed_script = self._redis.register_script(_SEED_LUA)
        self.routed = RoutedFeed(self._member_id, config.routed_queue)
        self._apply: ApplyFn | None = None
        self._served = FleetSnapshot()
        self._tasks: list[asyncio.Task[None]] = []
        self._synced = asyncio.Event()
        self._sync_lock = asyncio.Lock()
        self.stale = True
        self.failures = 0
        self.members_seen = 0

    @property
    def member_id(self) -> str:
        return self._member_id

    # Joining and following.

    async def start(self, apply: ApplyFn, seed: FleetSnapshot) -> None:
        self._apply = apply
        self._served = seed
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._follow(), name="switchyard-fleet-follow"),
            loop.create_task(self._send_routed(), name="switchyard-fleet-routed"),
        ]
        # Serve the fleet's state from the first request if Redis answers soon; else serve the
        # seed (stale) and catch up when it does.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(2.0, 4 * self._config.timeout_s)):
                await self._synced.wait()

    async def _follow(self) -> None:
        cfg = self._config
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self._changes, self._routed_channel)
                await self._sync()
                await self._heartbeat()
                next_poll = next_beat = time.monotonic()
                while True:
                    message = await pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=cfg.poll_interval_s
                    )
                    now = time.monotonic()
                    changed = False
                    if message is not None:
                        if message["channel"] == self._routed_channel.encode():
                            self.routed.receive(message["data"])
                        else:
                            changed = True
                    if changed or now >= next_poll:
                        await self._sync()
                        next_poll = now + cfg.poll_interval_s
                    if now >= next_beat:
                        await self._heartbeat()
                        next_beat = now + cfg.heartbeat_s
            except (RedisError, OSError) as exc:
                self._went_stale(exc)
            except Exception:  # a bug must not stop this process following the fleet for good
                log.exception("fleet %s: following the fleet failed; retrying", self._ns)
                self.stale = True
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(cfg.retry_s)

    async def _sync(self) -> FleetSnapshot:
        """Apply the fleet's state if it is newer than what this member serves (or of another
        epoch); seed an empty one with this member's state."""
        async with self._sync_lock:
            rev, epoch = await self._redis.hmget(self._state_key, ["rev", "epoch"])
            served = self._served
            if rev is None:
                new_epoch = os.urandom(6).hex()
                fields = _snapshot_fields(served)
                await self._seed_script(
                    keys=[self._state_key], args=[self._changes, new_epoch, *fields]
                )
                log.info(
                    "fleet %s: seeded with this gateway's state (epoch %s)", self._ns, new_epoch
                )
            elif _text(epoch or b"") == served.epoch and int(rev) <= served.revision:
                self._fresh()
                return served
            snapshot = decode_snapshot(await self._redis.hgetall(self._state_key))
            if snapshot is not None and self._apply is not None:
                await self._apply(snapshot)
                self._served = snapshot
                await self._redis.hset(self._info_key, "applied", _mark(snapshot))
            self._fresh()
            return self._served

    async def _heartbeat(self) -> None:
        cfg = self._config
        now = time.time()
        info = self._info_key
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zadd(self._members_key, {self._member_id: now})
            pipe.zremrangebyscore(self._members_key, "-inf", now - cfg.member_ttl_s)
            pipe.hset(
                info,
                mapping={
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "applied": _mark(self._served),
                },
            )
            pipe.pexpire(info, int(cfg.member_ttl_s * 1000))
            await pipe.execute()
        self.members_seen = await self._redis.zcount(
            self._members_key, now - cfg.member_ttl_s, "+inf"
        )

    def _went_stale(self, exc: BaseException) -> None:
        self.failures += 1
        if not self.stale:
            # The exception text names host and port, never the URL's password.
            log.warning(
                "fleet %s: Redis unreachable (%s: %s); serving fleet revision %d as last known",
                self._ns,
                type(exc).__name__,
                exc,
                self._served.revision,
            )
        self.stale = True

    def _fresh(self) -> None:
        if self.stale and self._synced.is_set():
            log.info(
                "fleet %s: Redis reachable again; revision %d", self._ns, self._served.revision
            )
        self.stale = False
        self._synced.set()

    async def _send_routed(self) -> None:
        while True:
            await asyncio.sleep(self._config.routed_flush_s)
            if self.stale:  # kept queued (the oldest dropped, counted) until Redis answers
                continue
            batch = self.routed.take_batch()
            if batch is None:
                continue
            try:
                await self._redis.publish(self._routed_channel, batch)
            except (RedisError, OSError) as exc:
                self.routed.dropped += 1
                self._went_stale(exc)

    # Changing.

    async def publish(self, change: FleetChange) -> FleetSnapshot:
        args: list[Any] = [
            self._changes,
            encode_routing(change.routing) if change.routing is not None else "",
            encode_canary(change.canary) if change.canary is not None else "",
            os.urandom(6).hex(),
        ]
        for key, control in change.replicas.items():
            args += [key, encode_replica(control)]
        try:
            await self._publish_script(keys=[self._state_key], args=args)
            snapshot = await self._sync()
            await self._wait_applied(snapshot)
        except (RedisError, OSError) as exc:
            self._went_stale(exc)
            raise ServiceUnavailableError(
                "The fleet's shared state (Redis) cannot be reached; nothing was changed. "
                "Retry when it is back.",
                code="fleet_unavailable",
            ) from exc
        return snapshot

    async def _wait_applied(self, snapshot: FleetSnapshot) -> None:
        """Until every live member serves ``snapshot`` (or a newer revision), at most
        ``apply_wait_s``: so a change's answer means the fleet serves it."""
        deadline = time.monotonic() + self._config.apply_wait_s
        while True:
            members = await self.live_members()
            async with self._redis.pipeline(transaction=False) as pipe:
                for member in members:
                    pipe.hget(f"{self._ns}:member:{member}", "applied")
                marks = await pipe.execute()
            behind = [
                m for m, mark in zip(members, marks, strict=True) if not _serves(mark, snapshot)
            ]
            if not behind:
                return
            if time.monotonic() >= deadline:
                log.warning(
                    "fleet %s: revision %d not yet served by %s after %.1fs",
                    self._ns,
                    snapshot.revision,
                    ", ".join(behind),
                    self._config.apply_wait_s,
                )
                return
            await asyncio.sleep(APPLY_POLL_S)

    async def ack_drain(self, drain_id: str, in_flight: int) -> None:
        key = f"{self._ns}:drain:{drain_id}"
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, self._member_id, in_flight)
            pipe.expire(key, DRAIN_REPORT_TTL_S)
            await pipe.execute()

    async def drain_acks(self, drain_id: str) -> dict[str, int]:
        try:
            raw = await self._redis.hgetall(f"{self._ns}:drain:{drain_id}")
        except (RedisError, OSError) as exc:
            raise ServiceUnavailableError(
                "The fleet's shared state (Redis) cannot be reached.", code="fleet_unavailable"
            ) from exc
        return {_text(k): int(v) for k, v in raw.items()}

    async def live_members(self) -> list[str]:
        since = time.time() - self._config.member_ttl_s
        try:
            raw = await self._redis.zrangebyscore(self._members_key, since, "+inf")
        except (RedisError, OSError) as exc:
            raise ServiceUnavailableError(
                "The fleet's shared state (Redis) cannot be reached.", code="fleet_unavailable"
            ) from exc
        members = {_text(m) for m in raw if isinstance(m, bytes | str)} | {self._member_id}
        return sorted(members)

    async def lead(self, role: str, ttl_s: float) -> bool:
        """``SET NX PX`` takes a free lease; its holder renews it. While Redis cannot be reached
        every member leads (the chores are idempotent: the cost is work done twice, not lost)."""
        key, ttl_ms = f"{self._ns}:lead:{role}", max(1, int(ttl_s * 1000))
        try:
            if await self._redis.set(key, self._member_id, nx=True, px=ttl_ms):
                return True
            holder = await self._redis.get(key)
            if holder is None or _text(holder) != self._member_id:
                return False
            await self._redis.pexpire(key, ttl_ms)
            return True
        except (RedisError, OSError) as exc:
            log.debug("fleet lease %s: Redis unreachable (%s); leading meanwhile", role, exc)
            return True

    async def revoke_session(self, session_id: str, ttl_s: float) -> None:
        key = f"{self._ns}:session-revoked:{session_id}"
        try:
            await self._redis.set(key, b"1", ex=max(1, math.ceil(ttl_s)))
        except (RedisError, OSError) as exc:
            raise self._unreachable(exc, "the session was not revoked") from exc

    async def session_revoked(self, session_id: str) -> bool:
        try:
            return bool(await self._redis.exists(f"{self._ns}:session-revoked:{session_id}"))
        except (RedisError, OSError) as exc:
            raise self._unreachable(exc, "whether the session was revoked is unknown") from exc

    def _unreachable(self, exc: BaseException, what: str) -> ServiceUnavailableError:
        self._went_stale(exc)
        return ServiceUnavailableError(
            f"The fleet's shared state (Redis) cannot be reached: {what}.",
            code="fleet_unavailable",
        )

    def share_routing(self, target: str, selector: ObservingSelector) -> None:
        self.routed.attach(target, selector)

    def stats(self) -> dict[str, float]:
        return {
            "state_stale": float(self.stale),
            "revision": float(self._served.revision),
            "members": float(self.members_seen),
            "redis_failures": float(self.failures),
            **self.routed.stats(),
        }

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(RedisError, OSError):
            await self._redis.zrem(self._members_key, self._member_id)
        await self._redis.aclose()
