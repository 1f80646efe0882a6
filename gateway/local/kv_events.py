"""Subscribes to every replica's vLLM KV cache event publisher and feeds the selector (precise
prefix-aware routing), repairing sequence gaps from vLLM's replay socket.

vLLM side (``serving.vllm_config.KvEventsSettings``): ``--kv-events-config '{"enable_kv_cache_
events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", "replay_endpoint":
"tcp://*:5558", "topic": "kv"}'`` (a ``*`` endpoint makes vLLM *bind*). Gateway side: one ZMQ SUB
socket per replica *connects* to ``tcp://<replica host>:5557``
(``CacheAwareConfig.kv_event_endpoints``), filtered on ``topic``.

Each message is ``(topic, seq, payload)``: ``seq`` counts the publisher's batches from 0 (8 bytes,
big endian), payloads are decoded by ``router.kv_events`` and applied with
``selector.apply_kv_events(replica, events)``. Per replica, in order:

- ``seq`` = last applied + 1: applied.
- ``seq`` beyond that: a *gap* (ZMQ PUB/SUB drops messages while a subscriber is away or its
  queue is full). With a replay endpoint (``kv_event_replay_endpoints``; vLLM's ROUTER socket,
  which keeps its last ``buffer_steps`` batches) we ask for everything from the first missing
  ``seq``: a DEALER socket sends ``["", start (8 bytes, big endian)]`` and receives ``["", topic,
  seq, payload]`` per buffered batch, then ``["", "", -1, ""]``. If the replay covers the gap the
  batches are applied in order and nothing is lost. If it cannot (no replay endpoint, a silence
  of ``kv_event_replay_timeout_s``, or the batches are no longer buffered) the index of that
  replica is no longer known to be right: ``selector.kv_events_lost(replica, n)`` lets the
  selector drop it (``router/cache_aware.py``: until new events refill it, the replica is scored
  on what was routed there, as in approximate mode), and the replay's later batches are applied.
- ``seq`` at or below one already *received* live: the publisher started again from 0, i.e. the
  replica restarted with an empty cache: the index is cleared (an ``AllBlocksCleared``).
- ``seq`` at or below the last applied one but new live: already applied from a replay; skipped.
- the first message: if a replay endpoint is set and ``seq > 0``, what the replica cached before
  we connected is caught up from the replay buffer (best effort: not counted as a gap).

Counters per replica are in :attr:`KvEventSubscriber.stats` (exported by the gateway's
``/metrics`` as ``switchyard_kv_events_*``). A payload that does not decode is counted and
skipped, never fatal. Sockets reconnect on their own (ZMQ).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import zmq
import zmq.asyncio

from router.kv_events import AllBlocksCleared, KvEventDecodeError, decode_batch, decode_seq
from router.selector_config import CacheAwareConfig
from router.selectors import ObservingSelector

log = logging.getLogger(__name__)

# A replay returns at most the publisher's buffer (vLLM's default buffer_steps is 10_000).
MAX_REPLAY_BATCHES = 100_000
_END_SEQ = -1


@dataclass
class SubscriptionStats:
    batches: int = 0  # batches applied (live or replayed)
    events_applied: int = 0
    gaps: int = 0  # sequence gaps seen on the live socket
    gaps_repaired: int = 0  # ... of which the replay filled completely
    replayed_batches: int = 0  # batches applied from a replay (catch-up included)
    lost_batches: int = 0  # batches neither received nor replayed
    index_resets: int = 0  # unrepaired gaps: the selector was told to drop the replica's index
    restarts: int = 0  # the publisher's sequence started again (replica restart)
    duplicates: int = 0  # live batches already applied from a replay
    replay_timeouts: int = 0
    decode_errors: int = 0
    last_seq: int | None = None  # last applied
    live_seq: int | None = None  # last received on the live socket

    def counters(self) -> dict[str, float]:
        """The monotonic counters (for metrics)."""
        return {
            k: float(v)
            for k, v in vars(self).items()
            if k not in ("last_seq", "live_seq") and isinstance(v, int)
        }


class KvEventSubscriber:
    """One SUB socket per replica; call :meth:`start` inside the running event loop."""

    def __init__(
        self,
        endpoints: Mapping[str, str],
        selector: ObservingSelector,
        *,
        topic: str = "",
        replay_endpoints: Mapping[str, str] | None = None,
        replay_timeout_s: float,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        """Prefer :meth:`from_config`; ``replay_timeout_s`` as ``kv_event_replay_timeout_s``."""
        self.endpoints = {url.rstrip("/"): ep for url, ep in endpoints.items()}
        self.replay_endpoints = {
            url.rstrip("/"): ep for url, ep in (replay_endpoints or {}).items()
        }
        self.replay_timeout_s = replay_timeout_s
        self.selector = selector
        self.topic = topic.encode()
        self._ctx = context or zmq.asyncio.Context()
        self._own_ctx = context is None
        self.stats = {url: SubscriptionStats() for url in self.endpoints}
        self._tasks: list[asyncio.Task[None]] = []
        self._sockets: list[zmq.asyncio.Socket] = []

    @classmethod
    def from_config(
        cls, config: CacheAwareConfig, selector: ObservingSelector
    ) -> KvEventSubscriber:
        """The subscriber a precise-mode selector config describes."""
        return cls(
            config.kv_event_endpoints,
            selector,
            topic=config.kv_event_topic,
            replay_endpoints=config.kv_event_replay_endpoints,
            replay_timeout_s=config.kv_event_replay_timeout_s,
        )

    # -- applying batches ------------------------------------------------------------------
    def _apply(self, replica: str, seq: int, payload: bytes) -> None:
        stats = self.stats[replica]
        stats.last_seq = seq
        try:
            batch = decode_batch(payload)
        except KvEventDecodeError as exc:
            stats.decode_errors += 1
            log.warning("replica %s: undecodable KV event batch %d: %s", replica, seq, exc)
            return
        stats.batches += 1
        stats.events_applied += self.selector.apply_kv_events(replica, batch.events)

    async def receive(self, replica: str, frames: list[bytes]) -> None:
        """Handle one live multipart message from ``replica`` (public for tests)."""
        stats = self.stats[replica]
        if len(frames) != 3:
            stats.decode_errors += 1
            return
        _, seq_frame, payload = frames
        seq = decode_seq(seq_frame)
        if stats.live_seq is not None and seq <= stats.live_seq:
            stats.restarts += 1
            log.info("replica %s: KV event sequence restarted at %d", replica, seq)
            self.selector.apply_kv_events(replica, (AllBlocksCleared(),))
            stats.last_seq = None
        stats.live_seq = seq
        last = stats.last_seq
        if last is not None and seq <= last:
            stats.duplicates += 1
            return
        if last is None:
            if seq > 0 and replica in self.replay_endpoints:
                await self._catch_up(replica, seq)
        elif seq > last + 1:
            await self._fill_gap(replica, last + 1, seq)
        if stats.last_seq is None or seq > stats.last_seq:
            self._apply(replica, seq, payload)

    async def _catch_up(self, replica: str, seq: int) -> None:
        """First contact: apply what the replay buffer holds before ``seq`` (best effort: the
        buffer may have dropped the oldest batches; their blocks stay unknown)."""
        stats = self.stats[replica]
        for rseq, payload in await self._replay(replica, 0):
            if rseq >= seq:
                break
            self._apply(replica, rseq, payload)
            stats.replayed_batches += 1
        if stats.last_seq is not None and stats.last_seq < seq - 1:
            # The replay stopped short (timeout): blocks removed since are unknown, so what it
            # stored cannot be trusted either.
            log.warning("replica %s: KV event catch-up incomplete; starting empty", replica)
            self.selector.apply_kv_events(replica, (AllBlocksCleared(),))

    async def _fill_gap(self, replica: str, start: int, seq: int) -> None:
        """Batches ``start .. seq - 1`` never arrived: replay them, or give up on the index."""
        stats = self.stats[replica]
        stats.gaps += 1
        replayed = await self._replay(replica, start) if replica in self.replay_endpoints else []
        have = dict(replayed)
        covered = sum(1 for s in have if start <= s < seq)
        if covered == seq - start:
            stats.gaps_repaired += 1
            todo = sorted(s for s in have if s >= start)
        else:
            lost = seq - start - covered
            stats.lost_batches += lost
            stats.index_resets += 1
            log.warning(
                "replica %s: %d KV event batches lost (seq %d..%d); its prefix index is reset",
                replica, lost, start, seq - 1,
            )  # fmt: skip
            self.selector.kv_events_lost(replica, lost)
            # What the replay holds after the last missing batch is still true: apply it.
            tail = seq - 1
            while tail >= start and tail in have:
                tail -= 1
            todo = sorted(s for s in have if s > tail)
        for s in todo:
            self._apply(replica, s, have[s])
            stats.replayed_batches += 1

    async def _replay(self, replica: str, start: int) -> list[tuple[int, bytes]]:
        """Batches with ``seq >= start`` from ``replica``'s replay socket, in order; a silence
        of ``replay_timeout_s`` ends the replay early (what arrived is returned)."""
        stats = self.stats[replica]
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.replay_endpoints[replica])
        out: list[tuple[int, bytes]] = []
        wait_ms = max(1, int(self.replay_timeout_s * 1000))
        try:
            await sock.send_multipart([b"", start.to_bytes(8, "big")])
            for _ in range(MAX_REPLAY_BATCHES + 1):
                if not await sock.poll(wait_ms):
                    stats.replay_timeouts += 1
                    break
                frames = await sock.recv_multipart()
                if len(frames) != 4:
                    stats.decode_errors += 1
                    continue
                rseq = decode_seq(frames[2])
                if rseq == _END_SEQ:
                    break
                if rseq >= start:
                    out.append((rseq, frames[3]))
        finally:
            sock.close(linger=0)
        out.sort(key=lambda item: item[0])
        return out

    # -- sockets ---------------------------------------------------------------------------
    async def _listen(self, replica: str, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart()
            await self.receive(replica, frames)

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
        """Close the sockets; :meth:`start` may be called again (stats are kept)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for sock in self._sockets:
            sock.close(linger=0)
        self._tasks.clear()
        self._sockets.clear()

    async def aclose(self) -> None:
        """:meth:`stop`, and end the ZMQ context if this subscriber made it."""
        await self.stop()
        if self._own_ctx:
            self._ctx.term()
