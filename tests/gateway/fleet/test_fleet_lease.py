"""One member of a fleet does a fleet-wide chore (the console's roll-ups): the holder of the
role's lease, renewed while it lives and taken over by another member once it lapses."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.fleet.base import LocalFleet
from gateway.fleet.config import FleetConfig
from gateway.fleet.redis_fleet import RedisFleet
from tests.gateway.fleet.harness import REDIS_URL, drop_redis_keys

pytestmark = [pytest.mark.redis]


def test_a_fleet_of_one_process_always_leads() -> None:
    assert asyncio.run(LocalFleet().lead("console-rollup", 1.0)) is True


def test_one_member_holds_a_role_until_its_lease_lapses_then_another_takes_it() -> None:
    name = f"switchyard:lease-test:{uuid.uuid4().hex[:8]}"
    config = FleetConfig(backend="redis", redis_url=REDIS_URL, name=name)

    async def scenario() -> None:
        a, b = RedisFleet(config), RedisFleet(config)
        try:
            assert await a.lead("rollup", 0.3) is True
            assert await b.lead("rollup", 0.3) is False
            for _ in range(3):  # the holder renews: longer than one lease in all
                await asyncio.sleep(0.15)
                assert await a.lead("rollup", 0.3) is True
                assert await b.lead("rollup", 0.3) is False
            assert await b.lead("other-role", 0.3) is True  # roles are independent
            await asyncio.sleep(0.45)  # a stops renewing (it died): its lease lapses
            assert await b.lead("rollup", 0.3) is True
            assert await a.lead("rollup", 0.3) is False
        finally:
            await a.aclose()
            await b.aclose()

    try:
        asyncio.run(scenario())
    finally:
        drop_redis_keys(REDIS_URL, name)


def test_with_redis_unreachable_every_member_leads_rather_than_none() -> None:
    config = FleetConfig(
        backend="redis", redis_url="redis://127.0.0.1:1/0", name="x", timeout_s=0.2
    )

    async def scenario() -> bool:
        fleet = RedisFleet(config)
        try:
            return await fleet.lead("rollup", 1.0)
        finally:
            await fleet.aclose()

    assert asyncio.run(scenario()) is True
