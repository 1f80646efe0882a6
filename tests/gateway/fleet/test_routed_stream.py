"""Cache-aware decisions travel between fleet members through the Redis stream ``N:routed``: a
member cut off from Redis gets the batches sent meanwhile once it reconnects; one away past the
stream's bound counts the gap and reads on; a member skips its own batches, and one that joins
starts at the stream's end.

Real Redis; members are :class:`RedisFleet` objects in this process, one of them reaching Redis
through a TCP forwarder the test cuts (Redis stays up, as on a starved box whose client timed out).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import redis.asyncio as aioredis

from gateway.fleet.config import FleetConfig
from gateway.fleet.redis_fleet import RedisFleet
from gateway.fleet.snapshot import FleetSnapshot
from router.cache_aware import CacheAwareSelector
from router.selector_config import CacheAwareConfig
from tests.gateway.fleet.harness import REDIS_URL, drop_redis_keys
from tests.gateway.fleet.test_routed_feed import features, prompt, views
from tests.traffic.store.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.redis]

Check = Callable[[], bool | Awaitable[bool]]


async def until(check: Check, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        done = check()
        if not isinstance(done, bool):
            done = await done
        if done:
            return
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)


async def _ignore(snapshot: FleetSnapshot) -> None:
    """These members share no routing config: only their decisions matter here."""


class Members:
    """Members of one fleet (a fresh name per test), and a client of the test's own."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.key = f"{name}:routed"
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.fleets: list[RedisFleet] = []

    async def join(self, redis_url: str = REDIS_URL) -> tuple[RedisFleet, CacheAwareSelector]:
        config = FleetConfig(
            backend="redis", redis_url=redis_url, name=self.name, retry_s=0.05, timeout_s=0.5
        )
        fleet = RedisFleet(config)
        self.fleets.append(fleet)
        selector = CacheAwareSelector(CacheAwareConfig(max_share_ratio=None))
        fleet.share_routing("local", selector)
        await fleet.start(_ignore, FleetSnapshot())
        await until(lambda: fleet.routed_stream.last_id is not None, "the member joined")
        return fleet, selector

    async def entries(self) -> int:
        return int(await self.redis.xlen(self.key))

    async def route(self, selector: CacheAwareSelector, repos: range) -> dict[int, str]:
        """Route a context per repository through ``selector``; returns once they are one entry
        of the stream."""
        before = await self.entries()
        placed = {
            r: selector.select_replica("local", views(), features(prompt(r, 20))) for r in repos
        }
        await until(lambda: self._grew(before), "the decisions are in the stream")
        return placed

    async def _grew(self, before: int) -> bool:
        return await self.entries() > before

    async def aclose(self) -> None:
        for fleet in self.fleets:
            await fleet.aclose()
        await self.redis.aclose()


@asynccontextmanager
async def fleet_members() -> AsyncIterator[Members]:
    members = Members(f"switchyard:routed-test:{uuid.uuid4().hex[:8]}")
    try:
        yield members
    finally:
        await members.aclose()
        drop_redis_keys(REDIS_URL, members.name)


@asynccontextmanager
async def forwarder() -> AsyncIterator[TcpProxy]:
    host, port = REDIS_URL.removeprefix("redis://").split("/")[0].split(":")
    proxy = TcpProxy(host, int(port))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


def finds(selector: CacheAwareSelector, placed: dict[int, str]) -> bool:
    """Whether a follow-up of each routed context goes where its prefix is, found by prefix."""
    for repo, replica in placed.items():
        follow_up = prompt(repo, 20) + prompt(100 + repo, 2)
        if selector.select_replica("local", views(), features(follow_up)) != replica:
            return False
        if selector.last is None or selector.last.reason != "prefix":
            return False
    return True


def test_decisions_sent_while_a_member_is_cut_off_reach_it_when_it_reconnects() -> None:
    async def scenario() -> None:
        async with fleet_members() as members, forwarder() as proxy:
            _, one_selector = await members.join()
            two, two_selector = await members.join(f"redis://127.0.0.1:{proxy.port}/0")
            await proxy.stop()  # two's connections fail; Redis itself stays up
            await until(lambda: two.stale, "the cut-off member knows it")
            placed = await members.route(one_selector, range(9))
            assert two.routed.received == 0
            await proxy.start()
            await until(lambda: two.routed.received == 9, "the member got the batch at last")
            assert finds(two_selector, placed)
            assert len(set(placed.values())) == 3
            assert two.stats()["routed_gaps"] == 0

    asyncio.run(scenario())


def test_a_member_away_past_the_streams_bound_counts_a_gap_and_reads_on() -> None:
    async def scenario() -> None:
        async with fleet_members() as members, forwarder() as proxy:
            one, one_selector = await members.join()
            two, _ = await members.join(f"redis://127.0.0.1:{proxy.port}/0")
            await members.route(one_selector, range(3))
            await until(lambda: two.routed.received == 3, "the first batch arrived")
            await proxy.stop()
            await until(lambda: two.stale, "the cut-off member knows it")
            await members.route(one_selector, range(3, 6))
            await members.route(one_selector, range(6, 9))
            # The bound passed while it was away: only the newest batch is left (the last one
            # it read is gone with the other).
            await members.redis.xtrim(members.key, maxlen=1, approximate=False)
            await proxy.start()
            await until(lambda: two.routed.received == 6, "the member read on")
            assert two.stats()["routed_gaps"] == 1
            assert one.stats()["routed_gaps"] == 0

    asyncio.run(scenario())


def test_a_member_skips_its_own_batches_and_a_new_member_starts_at_the_streams_end() -> None:
    async def scenario() -> None:
        async with fleet_members() as members:
            one, one_selector = await members.join()
            two, two_selector = await members.join()
            await members.route(one_selector, range(3))
            await members.route(two_selector, range(10, 12))
            # Each reads the stream in order: once it has the other's batch, it has passed
            # its own, which it did not apply.
            await until(lambda: one.routed.received >= 2, "one got two's batch")
            await until(lambda: two.routed.received >= 3, "two got one's batch")
            assert one.routed.received == 2 and two.routed.received == 3
            three, _ = await members.join()
            await members.route(two_selector, range(20, 21))
            await until(lambda: three.routed.received >= 1, "the new member got the new batch")
            assert three.routed.received == 1  # nothing from before it joined

    asyncio.run(scenario())
