"""The fleet's cache-aware decisions over a Redis stream: a member that reconnects misses none.

Key (``N`` = ``fleet.name``): ``N:routed``, a stream; each entry is one batch of
:mod:`gateway.fleet.routed_feed` in its field ``b``.

Sending: every ``fleet.routed_flush_s`` the queued decisions go as one entry,
``XADD N:routed MAXLEN ~ <routed_stream_len> * b <batch>``: the stream keeps about the newest
``routed_stream_len`` batches (at least that many: Redis trims whole nodes of entries).

Reading: each member reads with ``XREAD BLOCK`` from the last id it has read; every member reads
every entry, its own too (:meth:`RoutedFeed.receive` skips those by the member id in the batch).
When the connection fails (a Redis timeout on a starved box, Redis restarting) the member makes
another after ``retry_s`` and reads on from that id: the batches added meanwhile arrive late, not
never (over pub/sub they were lost, and a session's next turn could land on another replica).
Unless more than the stream holds arrived meanwhile: then its last id has been trimmed, which is
counted (``routed_gaps`` in ``/metrics``), and it reads on from the oldest entry kept.

When a gap is looked for: before reading on after a reconnect, and after a read that returned a
full page (``XREAD COUNT``). Those are enough: entries newer than the last id are trimmed only
after it is, and then every entry of the stream is newer than it, so the read returns a full page
(the stream keeps at least ``routed_stream_len`` entries, and a page is at most that many). After
a full page the check is made once the page is read, so a last id trimmed just then counts too:
the member was then a whole stream behind.

A member starting fresh begins after the newest entry at its start: the batches before are
decisions made before it joined (some about sessions since ended or replicas since drained); its
index fills from live traffic as a restarted single gateway's does, and joining does not wait on
reading up to ``routed_stream_len`` batches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.fleet.config import FleetConfig
from gateway.fleet.routed_feed import RoutedFeed

log = logging.getLogger(__name__)

BATCH_FIELD: Final = b"b"
READ_PAGE: Final = 512  # entries per XREAD at most: a backlog is read in pages
BLOCK_SHARE: Final = 0.5  # of timeout_s: a blocked read answers well within the socket timeout
BEFORE_ANY: Final = "0-0"  # the last id of a member that started on an empty stream


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _entries(reply: Any) -> list[tuple[bytes | str, dict[bytes | str, bytes | str]]]:
    """The entries of one stream's ``XREAD`` reply, RESP2 (``[[key, entries]]``) or RESP3
    (``{key: [entries]}``)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return list(next(iter(reply.values()))[0])
    return list(reply[0][1])


def _order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class RoutedStream:
    """Sends this member's batches to ``N:routed`` and applies the others' (module docstring).

    ``is_stale``: while true, batches wait in the feed's queue; ``on_error``: told of every
    failed Redis call (the fleet counts it and goes stale)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        config: FleetConfig,
        feed: RoutedFeed,
        *,
        is_stale: Callable[[], bool],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.key = f"{config.name}:routed"
        self._redis = redis
        self._config = config
        self._feed = feed
        self._is_stale = is_stale
        self._on_error = on_error
        self._page = min(READ_PAGE, config.routed_stream_len)
        block_s = min(config.poll_interval_s, BLOCK_SHARE * config.timeout_s)
        self._block_ms = max(1, int(block_s * 1000))
        self.last_id: str | None = None  # None: not joined yet
        self.reading = False  # connected and reading on (False from a failed call to the next)

    async def join(self) -> None:
        """Start reading after the newest entry (a fresh member; see the module docstring).
        Called before the gateway serves, so that no decision another member makes once this
        one serves is read past; raises the Redis error when Redis does not answer (the reader
        joins when it does)."""
        if self.last_id is None:
            self.last_id = await self._newest_id()

    async def send(self) -> None:
        """Forever: one entry every ``routed_flush_s`` when decisions are queued."""
        while True:
            await asyncio.sleep(self._config.routed_flush_s)
            if self._is_stale():  # kept queued (the oldest dropped, counted) until Redis answers
                continue
            batch = self._feed.take_batch()
            if batch is None:
                continue
            try:
                await self._redis.xadd(
                    self.key,
                    {BATCH_FIELD: batch},
                    maxlen=self._config.routed_stream_len,
                    approximate=True,
                )
            except (RedisError, OSError) as exc:
                self._feed.dropped += 1
                self._on_error(exc)

    async def follow(self) -> None:
        """Forever: apply the other members' batches, reading on from the last id after a
        failure (``retry_s`` later)."""
        while True:
            try:
                await self._read_on()
            except (RedisError, OSError) as exc:
                self.reading = False
                self._on_error(exc)
            except Exception:  # a bug must not stop this member learning the others' decisions
                self.reading = False
                log.exception("fleet %s: reading %s failed; retrying", self._config.name, self.key)
            await asyncio.sleep(self._config.retry_s)

    async def _read_on(self) -> None:
        """Read until a call fails."""
        if self.last_id is None:
            self.last_id = await self._newest_id()
        elif await self._trimmed(self.last_id):
            self._feed.gaps += 1
            newest = await self._newest_id()
            if _order(newest) < _order(self.last_id):  # a Redis that came back empty: a new
                self.last_id = newest  # stream, its ids maybe behind (another clock)
        self.reading = True
        while True:
            start = self.last_id
            reply = await self._redis.xread(
                {self.key: start}, count=self._page, block=self._block_ms
            )
            entries = _entries(reply)
            for entry_id, fields in entries:
                self.last_id = _text(entry_id)  # first: an entry that breaks is not read again
                self._feed.receive(_bytes(fields.get(BATCH_FIELD, b"")))
            if len(entries) >= self._page and await self._trimmed(start):
                self._feed.gaps += 1

    async def _newest_id(self) -> str:
        newest = await self._redis.xrevrange(self.key, count=1)
        return _text(newest[0][0] or BEFORE_ANY) if newest else BEFORE_ANY

    async def _trimmed(self, entry_id: str) -> bool:
        """Whether ``entry_id`` is gone from the stream (trimmed, or the stream lost with a
        Redis that came back empty: either way batches after it may never arrive)."""
        if entry_id == BEFORE_ANY:
            return False
        return not await self._redis.xrange(self.key, entry_id, entry_id, count=1)
