"""The KV event subscriber against vLLM's own ZMQ publisher (``ZmqEventPublisher``, no GPU
needed): a sequence gap is filled from vLLM's replay socket; a gap the replay cannot fill resets
that replica's prefix index and is counted; a publisher that starts again from 0 (replica restart)
clears it. Sockets: the PUB on an ipc path, the replay ROUTER on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from gateway.local.kv_events import KvEventSubscriber
from router.cache_aware import CacheAwareSelector
from router.selector_config import CacheAwareConfig
from serving.replica import find_free_port
from tests.kv_event_helpers import batch, encode, kv, removed, stored

A = "http://127.0.0.1:18001"
TOPIC = "kv"
POLL_S = 0.02
MAX_POLLS = 500  # bounds every wait (about 10 s)


class Replica:
    """vLLM's publisher as a replica runs it, plus a selector fed by our subscriber."""

    def __init__(self, tmp: Path, buffer_steps: int, replay: bool = True) -> None:
        self.pub_endpoint = f"ipc://{tmp / 'pub.ipc'}"
        self.replay_endpoint = f"tcp://127.0.0.1:{find_free_port()}"
        self.publisher = kv.ZmqEventPublisher(
            0,
            endpoint=self.pub_endpoint,
            replay_endpoint=self.replay_endpoint,
            buffer_steps=buffer_steps,
            topic=TOPIC,
        )
        config = CacheAwareConfig(
            mode="precise",
            kv_event_endpoints={A: self.pub_endpoint},
            kv_event_replay_endpoints={A: self.replay_endpoint} if replay else {},
            kv_event_topic=TOPIC,
        )
        self.selector = CacheAwareSelector(config)
        self.subscriber = KvEventSubscriber.from_config(config, self.selector)
        self.published = 0

    def publish(self, *events: Any) -> int:
        self.publisher.publish(batch(*events))
        self.published += 1
        return self.published - 1

    def sent(self) -> int:
        """Batches the publisher has sent: the last buffered seq + 1, asked of its replay
        socket as a client would."""
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.replay_endpoint)
        try:
            sock.send_multipart([b"", (0).to_bytes(8, "big")])
            last = -1
            for _ in range(MAX_POLLS):
                if not sock.poll(int(POLL_S * 1000 * MAX_POLLS)):
                    raise AssertionError("the replay socket does not answer")
                seq = int.from_bytes(sock.recv_multipart()[2], "big", signed=True)
                if seq < 0:
                    return last + 1
                last = seq
        finally:
            sock.close()
        raise AssertionError("endless replay")

    def holds(self, key: int) -> bool:
        return bool(self.selector.index.owners(key) & (1 << self.selector.slot_of(A)))

    async def until(self, done: Callable[[], bool], nudge: bool = False) -> None:
        """Wait until ``done()``; ``nudge``: publish an empty batch now and then, which a
        subscriber that is still joining may miss (ZMQ PUB/SUB drops until connected)."""
        for i in range(MAX_POLLS):
            if done():
                return
            if nudge and i % 10 == 0:
                self.publish()
            await asyncio.sleep(POLL_S)
        raise AssertionError(f"not reached: {self.subscriber.stats[A]}")

    async def away(self, *batches: list[Any]) -> None:
        """Publish ``batches`` while the subscriber is stopped, and wait until they are sent."""
        await self.subscriber.stop()
        for events in batches:
            self.publish(*events)
        await self.until(lambda: self.sent() == self.published)

    async def connect(self) -> None:
        self.subscriber.start()
        applied = self.subscriber.stats[A].batches
        await self.until(lambda: self.subscriber.stats[A].batches > applied, nudge=True)


@pytest.fixture
def make_replica(tmp_path: Path) -> Iterator[Callable[..., Replica]]:
    made: list[Replica] = []

    def make(buffer_steps: int = 1000, replay: bool = True) -> Replica:
        replica = Replica(tmp_path, buffer_steps, replay)
        made.append(replica)
        return replica

    yield make
    for replica in made:
        replica.publisher.shutdown()


@pytest.fixture
async def closing() -> AsyncIterator[list[KvEventSubscriber]]:
    subscribers: list[KvEventSubscriber] = []
    yield subscribers
    for s in subscribers:
        await s.aclose()


async def test_first_contact_catches_up_from_the_replay_buffer(
    make_replica: Callable[..., Replica], closing: list[KvEventSubscriber]
) -> None:
    replica = make_replica()
    closing.append(replica.subscriber)
    replica.publish(stored([101, 102]))  # before anyone listens: only the replay has it
    replica.publish(stored([103]))
    await replica.until(lambda: replica.sent() == replica.published)
    await replica.connect()
    await replica.until(lambda: replica.holds(103))
    stats = replica.subscriber.stats[A]
    assert replica.holds(101) and replica.holds(102)
    assert stats.replayed_batches >= 2 and stats.gaps == 0 and stats.index_resets == 0


async def test_a_gap_is_filled_from_vllms_replay_socket(
    make_replica: Callable[..., Replica], closing: list[KvEventSubscriber]
) -> None:
    replica = make_replica()
    closing.append(replica.subscriber)
    await replica.connect()
    replica.publish(stored([1, 2, 3]))
    await replica.until(lambda: replica.holds(3))
    await replica.away(  # these batches are never received live
        [stored([4, 5])], [removed([1, 2, 3])], [stored([6])]
    )
    replica.subscriber.start()
    replica.publish(stored([7]))
    await replica.until(lambda: replica.holds(7), nudge=True)
    stats = replica.subscriber.stats[A]
    assert stats.gaps >= 1 and stats.gaps_repaired == stats.gaps
    assert stats.lost_batches == 0 and stats.index_resets == 0
    assert [replica.holds(k) for k in (1, 2, 3, 4, 5, 6, 7)] == [False] * 3 + [True] * 4
    assert replica.selector.event_gaps == 0


async def test_a_gap_beyond_the_replay_buffer_resets_the_index_and_is_counted(
    make_replica: Callable[..., Replica], closing: list[KvEventSubscriber]
) -> None:
    replica = make_replica(buffer_steps=2)
    closing.append(replica.subscriber)
    await replica.connect()
    replica.publish(stored([1]))
    await replica.until(lambda: replica.holds(1))
    await replica.away(*([stored([key])] for key in (2, 3, 4, 5, 6)))  # the buffer keeps two
    replica.subscriber.start()
    await replica.until(lambda: replica.subscriber.stats[A].index_resets > 0, nudge=True)
    stats = replica.subscriber.stats[A]
    assert stats.index_resets == 1 and stats.lost_batches >= 3
    assert replica.selector.event_gaps == stats.lost_batches
    assert not replica.holds(1)  # stored before the gap: no longer vouched for
    assert not replica.holds(2)  # lost for good
    # Published after the gap (and after the reset): applied again.
    replica.publish(stored([8]))
    await replica.until(lambda: replica.holds(8))


async def test_without_a_replay_endpoint_a_gap_resets_the_index(
    make_replica: Callable[..., Replica], closing: list[KvEventSubscriber]
) -> None:
    replica = make_replica(replay=False)
    closing.append(replica.subscriber)
    await replica.connect()
    replica.publish(stored([1]))
    await replica.until(lambda: replica.holds(1))
    await replica.away([stored([2])])
    replica.subscriber.start()
    await replica.until(lambda: replica.subscriber.stats[A].index_resets > 0, nudge=True)
    assert not replica.holds(1) and not replica.holds(2)
    assert replica.subscriber.stats[A].replay_timeouts == 0  # nothing was asked


def _frames(seq: int, *events: Any) -> list[bytes]:
    return [TOPIC.encode(), seq.to_bytes(8, "big"), encode(*events)]


async def test_a_sequence_that_starts_again_means_a_restarted_replica() -> None:
    selector = CacheAwareSelector(CacheAwareConfig(mode="precise", kv_event_endpoints={A: "-"}))
    subscriber = KvEventSubscriber.from_config(selector.config, selector)
    await subscriber.receive(A, _frames(0, stored([1])))
    await subscriber.receive(A, _frames(1, stored([2])))
    await subscriber.receive(A, _frames(0, stored([3])))  # a new publisher: an empty cache
    slot = 1 << selector.slot_of(A)
    assert [bool(selector.index.owners(k) & slot) for k in (1, 2, 3)] == [False, False, True]
    stats = subscriber.stats[A]
    assert (stats.restarts, stats.gaps, stats.index_resets, stats.last_seq) == (1, 0, 0, 0)
    await subscriber.receive(A, [b"kv", b"\x00"])  # not a (topic, seq, payload) message
    await subscriber.receive(A, [TOPIC.encode(), (1).to_bytes(8, "big"), b"\xc1"])
    assert stats.decode_errors == 2
    await subscriber.aclose()


async def test_the_gateway_exports_the_subscriber_counters(
    make_replica: Callable[..., Replica],
) -> None:
    import httpx

    from serving.build import ensure_demo_model
    from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
    from tests.fixtures.vllm_fixture import cache_dir

    replica = make_replica()
    selector = {
        "kind": "cache_aware",
        "mode": "precise",
        "kv_event_endpoints": {A: replica.pub_endpoint},
        "kv_event_replay_endpoints": {A: replica.replay_endpoint},
        "kv_event_topic": TOPIC,
    }
    local = {"kind": "vllm", "model": "m", "replicas": [A], "replica_selector": selector,
             "tokenizer_dir": str(ensure_demo_model(cache_dir()))}  # fmt: skip
    cfg = gateway_config(A, backends={"local": local}, routing={"default": "local"})
    gw = GatewayThread(cfg).start()
    try:
        labels = f'{{replica="{A}",target="local"}}'
        name = "switchyard_kv_events_batches" + labels
        for _ in range(MAX_POLLS):
            replica.publish(stored([1]))
            text = (await asyncio.to_thread(httpx.get, gw.base_url + "/metrics")).text
            line = next((x for x in text.splitlines() if x.startswith(name)), None)
            if line is not None and float(line.split()[-1]) > 0:
                break
            await asyncio.sleep(POLL_S)
        else:
            raise AssertionError("no switchyard_kv_events_batches sample")
        assert f"switchyard_kv_events_index_resets{labels} 0.0" in text
    finally:
        await asyncio.to_thread(gw.stop)
