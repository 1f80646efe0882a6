"""Console sessions ended by a logout, for the whole fleet: a revocation is kept in the fleet (in
this process alone, or in Redis with an expiry) for the session's remaining lifetime, and a
logged-out cookie gets the login page from every gateway process; wrong admin tokens are counted
fleet-wide with the Redis rate-limit backend.

Two ``python -m gateway`` processes on the shared Redis (as ``harness.start_gateways`` starts
them), no store, in front of the frontier simulator.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from gateway.console import session
from gateway.errors import ServiceUnavailableError
from gateway.fleet.base import LocalFleet
from gateway.fleet.config import FleetConfig
from gateway.fleet.redis_fleet import RedisFleet
from loadtests.bench.servers import ServerFleet, free_port
from loadtests.bench.sim_gateway import simulator_aliases, simulator_backends
from tests.gateway.fleet.harness import (
    ADMIN_TOKEN,
    FLEET_REDIS_TIMEOUT_S,
    REDIS_URL,
    Gateway,
    drop_redis_keys,
    start_gateways,
)

pytestmark = [pytest.mark.redis]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_fleet_of_one_process_keeps_a_revocation_for_the_sessions_lifetime() -> None:
    clock = FakeClock()
    fleet = LocalFleet(clock=clock)

    async def scenario() -> None:
        assert await fleet.session_revoked("s1") is False
        await fleet.revoke_session("s1", 30.0)
        assert await fleet.session_revoked("s1") is True
        assert await fleet.session_revoked("s2") is False
        clock.now += 31.0  # the cookie has expired by now: nothing left to remember
        assert await fleet.session_revoked("s1") is False
        await fleet.revoke_session("s2", 5.0)  # pruned the lapsed one
        assert "s1" not in fleet._revoked

    asyncio.run(scenario())


def test_a_revocation_in_redis_is_seen_by_every_member_and_expires_with_the_session() -> None:
    name = f"switchyard:revoke-test:{uuid.uuid4().hex[:8]}"
    config = FleetConfig(backend="redis", redis_url=REDIS_URL, name=name)

    async def scenario() -> None:
        a, b = RedisFleet(config), RedisFleet(config)
        try:
            await a.revoke_session("sid-1", 90.4)
            assert await b.session_revoked("sid-1") is True
            assert await b.session_revoked("sid-2") is False
        finally:
            await a.aclose()
            await b.aclose()

    try:
        asyncio.run(scenario())
        client = redis.Redis.from_url(REDIS_URL)
        ttl = client.ttl(f"{name}:session-revoked:sid-1")
        client.close()
        assert 89 <= int(ttl) <= 91  # type: ignore[arg-type]  # sync client: an int
    finally:
        drop_redis_keys(REDIS_URL, name)


def test_with_redis_unreachable_a_session_is_neither_revoked_nor_taken_for_unrevoked() -> None:
    config = FleetConfig(
        backend="redis", redis_url="redis://127.0.0.1:1/0", name="x", timeout_s=0.2
    )

    async def scenario() -> None:
        fleet = RedisFleet(config)
        try:
            with pytest.raises(ServiceUnavailableError):
                await fleet.revoke_session("sid", 60.0)
            with pytest.raises(ServiceUnavailableError):
                await fleet.session_revoked("sid")
            assert fleet.stale
        finally:
            await fleet.aclose()

    asyncio.run(scenario())


def _config(sim_url: str, fleet_name: str) -> dict[str, Any]:
    return {
        "gateway": {"listen": {"host": "127.0.0.1", "port": free_port()}},
        "backends": simulator_backends(sim_url),
        "routing": {"default": "local", "aliases": simulator_aliases()},
        "store": {"enabled": False},
        "auth": {
            "required": False,
            "rate_limit_backend": "redis",
            "redis_url": REDIS_URL,
            "redis_namespace": f"{fleet_name}:rl",
        },
        "fleet": {
            "backend": "redis",
            "redis_url": REDIS_URL,
            "name": fleet_name,
            "timeout_s": FLEET_REDIS_TIMEOUT_S,
        },
    }


@pytest.fixture(scope="module")
def two_gateways(
    frontier_sim: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Gateway]]:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"Redis not reachable at {REDIS_URL}: {exc}")
    name = f"switchyard:console-sessions:{uuid.uuid4().hex[:10]}"
    work: Path = tmp_path_factory.mktemp("console-sessions")
    configs = [_config(frontier_sim.base_url, name) for _ in range(2)]
    try:
        with ServerFleet(work / "logs") as servers:
            yield start_gateways(servers, configs, work)
    finally:
        drop_redis_keys(REDIS_URL, name)


def test_a_logout_on_one_gateway_ends_the_session_on_the_other(
    two_gateways: list[Gateway],
) -> None:
    first, second = two_gateways
    with httpx.Client(base_url=first.url) as client:
        login = client.post("/ui/login", data={"operator": "ann", "token": ADMIN_TOKEN})
        assert login.status_code == 303
        cookie = client.cookies[session.COOKIE]
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/routing").text)
        assert csrf is not None
        copy = {session.COOKIE: cookie}
        assert httpx.get(second.url + "/ui/routing", cookies=copy).status_code == 200
        out = client.post("/ui/logout", data={"csrf": csrf.group(1)})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
    for gateway in (first, second):
        again = httpx.get(gateway.url + "/ui/routing", cookies=copy)
        assert again.status_code == 303, gateway.url
        assert again.headers["location"] == "/ui/login?next=/ui/routing"


def test_wrong_tokens_are_counted_across_the_fleet(two_gateways: list[Gateway]) -> None:
    first, second = two_gateways
    address = {"x-forwarded-for": "203.0.113.50"}
    for i in range(5):  # alternately on both: neither process sees five
        gateway = two_gateways[i % 2]
        wrong = httpx.get(
            gateway.url + "/admin/routing",
            headers={**address, "authorization": f"Bearer guess-{i}"},
        )
        assert wrong.status_code == 401
    right = {**address, "authorization": f"Bearer {ADMIN_TOKEN}"}
    for gateway in (first, second):
        refused = httpx.get(gateway.url + "/admin/routing", headers=right)
        assert refused.status_code == 429 and "retry-after" in refused.headers
    login = httpx.post(
        second.url + "/ui/login", data={"operator": "ann", "token": ADMIN_TOKEN}, headers=address
    )
    assert login.status_code == 429
