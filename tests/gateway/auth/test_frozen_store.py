"""A frozen PostgreSQL (connections open, nothing answered) never stalls key validation.

The store is reached through a TCP forwarder that can stall; ``frozen`` stalls it for a few
seconds, so a call that waits for the store can only return after the freeze ends, and each test
asserts that its call returned while the freeze still held. Keys are created and revoked over a
direct connection: only the authenticator's view of the store is frozen.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from gateway.auth import AuthConfig, Authenticator, KeyService
from gateway.errors import ServiceUnavailableError, error_response_parts
from tests.fixtures.postgres_fixture import PG_URL, pg_dsn
from tests.traffic.store.tcp_proxy import TcpProxy
from traffic.store.postgres_backend import PostgresBackend

from .test_keys import FakeClock, refusal

pytestmark = pytest.mark.postgres

FREEZE_S = 3.0  # longer than any answer from the cache could take


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.start()
    yield proxy
    proxy.resume()
    await proxy.stop()


@pytest.fixture
async def direct(pg_empty_schema: str) -> AsyncIterator[PostgresBackend]:
    backend = PostgresBackend(pg_dsn(pg_empty_schema, PG_URL))
    await backend.connect()
    yield backend
    await backend.close()


@pytest.fixture
async def via_proxy(pg_empty_schema: str, proxy: TcpProxy) -> AsyncIterator[PostgresBackend]:
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
    backend = PostgresBackend(pg_dsn(pg_empty_schema, url), connect_timeout_s=2)
    await backend.connect()
    yield backend
    await backend.close()


@contextlib.asynccontextmanager
async def frozen(proxy: TcpProxy) -> AsyncIterator[None]:
    """The store frozen until the block ends, or ``FREEZE_S`` at most."""
    proxy.stall()
    thaw = asyncio.get_running_loop().call_later(FREEZE_S, proxy.resume)
    try:
        yield
    finally:
        thaw.cancel()
        proxy.resume()


async def test_stale_key_is_admitted_from_the_cache_while_the_store_is_frozen(
    direct: PostgresBackend, via_proxy: PostgresBackend, proxy: TcpProxy
) -> None:
    clock = FakeClock()
    record, plaintext = await KeyService(direct).create("frozen-but-cached")
    auth = Authenticator(via_proxy, AuthConfig(cache_ttl_s=1, max_stale_s=300), clock=clock)
    await auth.authenticate(plaintext)
    clock.now += 10  # past cache_ttl_s, within max_stale_s
    async with frozen(proxy):
        principal = await auth.authenticate(plaintext)
        assert proxy.stalled, "the call waited for the store"
        assert (await auth.authenticate(plaintext)).key_id == record.id
    assert principal.key_id == record.id


async def test_background_refresh_picks_up_a_revocation_once_the_store_answers(
    direct: PostgresBackend, via_proxy: PostgresBackend, proxy: TcpProxy
) -> None:
    clock = FakeClock()
    service = KeyService(direct)
    record, plaintext = await service.create("revoked-during-freeze")
    auth = Authenticator(via_proxy, AuthConfig(cache_ttl_s=1, max_stale_s=300), clock=clock)
    await auth.authenticate(plaintext)
    async with frozen(proxy):
        assert await service.revoke(record.id)
        clock.now += 10
        await auth.authenticate(plaintext)  # stale, admitted; the re-read waits for the store
        assert proxy.stalled, "the call waited for the store"
    exc = await refusal(auth, plaintext, clock)
    assert error_response_parts(exc)[0] == 403 and exc.code == "key_revoked"


async def test_never_seen_key_gets_503_after_the_lookup_timeout_while_frozen(
    direct: PostgresBackend, via_proxy: PostgresBackend, proxy: TcpProxy
) -> None:
    record, plaintext = await KeyService(direct).create("never-seen")
    auth = Authenticator(via_proxy, AuthConfig(lookup_timeout_s=0.2))
    async with frozen(proxy):
        with pytest.raises(ServiceUnavailableError) as info:
            await auth.authenticate(plaintext)
        assert proxy.stalled, "the call waited for the store"
    status, _, body = error_response_parts(info.value)
    assert status == 503 and body["error"]["code"] == "auth_store_unavailable"
    for _ in range(100):  # the store answers again: the key works
        with contextlib.suppress(ServiceUnavailableError):
            assert (await auth.authenticate(plaintext)).key_id == record.id
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the key was not accepted after the freeze")


async def test_key_past_max_stale_waits_for_the_store_then_gets_503(
    direct: PostgresBackend, via_proxy: PostgresBackend, proxy: TcpProxy
) -> None:
    clock = FakeClock()
    _, plaintext = await KeyService(direct).create("too-old")
    config = AuthConfig(cache_ttl_s=1, max_stale_s=30, lookup_timeout_s=0.2)
    auth = Authenticator(via_proxy, config, clock=clock)
    await auth.authenticate(plaintext)
    clock.now += 60  # beyond max_stale_s: the cached answer is too old to trust
    async with frozen(proxy):
        with pytest.raises(ServiceUnavailableError) as info:
            await auth.authenticate(plaintext)
        assert proxy.stalled, "the call waited for the store"
    assert info.value.code == "auth_store_unavailable"
