"""Subscribes to every replica's vLLM KV cache event publisher and feeds the selector (precise
prefix-aware routing).

vLLM side: start each replica with ``--kv-events-config '{"enable_kv_cache_events": true,
"publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv"}'`` (a ``*`` endpoint makes vLLM
*bind*; a host endpoint would make it connect). Gateway side: one ZMQ SUB socket per replica
*connects* to ``tcp://<replica host>:5557`` (``CacheAwareConfig.kv_event_endpoints``), filtered
on ``topic``.

Each message is ``(topic, seq, payload)``; payloads are decoded by ``router.kv_events`` and
applied with ``selector.apply_kv_events(replica, events)``. ``seq`` increases by one per batch:
a jump means the publisher dropped batches or we connected late (ZMQ PUB/SUB drops while a
subscriber is away) and is reported with ``selector.kv_events_lost``; the index then may hold
blocks vLLM has evicted (bounded, harmless: a wrong guess costs one miss) or lack blocks it has
stored. A payload that does not decode is counted and skipped, never fatal. Sockets reconnect on
their own (ZMQ), so a replica restart needs nothing from us.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import zmq
import zmq.asyncio

from router.kv_events import KvEventDecodeError, decode_batch, decode_seq
from router.selectors import ObservingSelector

log = logging.getLogger(__name__)


@dataclass
class SubscriptionStats:
    batches: int = 0
    events_applied: int = 0
    lost_batches: int = 0
    decode_errors: int = 0
    last_seq: int | None = None


class KvEventSubscriber:
    """One SUB socket per replica; call :meth:`start` inside the running event loop."""

    def __init__(
        self,
        endpoints: Mapping[str, str],
        selector: ObservingSelector,
        *,
        topic: str = "",
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        self.endpoints = {url.rstrip("/"): ep for url, ep in endpoints.items()}
        self.selector = selector
        self.topic = topic.encode()
        self._ctx = context or zmq.asyncio.Context()
        self._own_ctx = context is None
        self.stats = {url: SubscriptionStats() for url in self.endpoints}
        self._tasks: list[asyncio.Task[None]] = []
        self._sockets: list[zmq.asyncio.Socket] = []

    def handle(self, replica: str, frames: list[bytes]) -> None:
        """Apply one multipart message from ``replica`` (public for tests and replays)."""
        stats = self.stats[replica]
        if len(frames) != 3:
            stats.decode_errors += 1
            return
        _, seq_frame, payload = frames
        seq = decode_seq(seq_frame)
        try:
            batch = decode_batch(payload)
        except KvEventDecodeError as exc:
            stats.decode_errors += 1
            log.warning("replica %s: undecodable KV event batch %d: %s", replica, seq, exc)
            return
        if stats.last_seq is not None and seq > stats.last_seq + 1:
            lost = seq - stats.last_seq - 1
            stats.lost_batches += lost
            self.selector.kv_events_lost(replica, lost)
        stats.last_seq = seq
        stats.batches += 1
        stats.events_applied += self.selector.apply_kv_events(replica, batch.events)

    async def _listen(self, replica: str, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart()
            self.handle(replica, frames)

    def start(self) -> None:
        if self._tasks:
            return
        for replica, endpoint in self.endpoints.items():
            sock = self._ctx.socket(zmq.SUB)
            sock.setsockopt(zmq.SUBSCRIBE, self.topic)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            self._sockets.append(sock)
            self._tasks.append(asyncio.create_task(self._listen(replica, sock)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for sock in self._sockets:
            sock.close(linger=0)
        self._tasks.clear()
        self._sockets.clear()
        if self._own_ctx:
            self._ctx.term()
