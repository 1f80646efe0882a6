"""API keys: shown once, stored hashed, checked through a cache refreshed in the background;
401/403/503 in OpenAI's shape."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator

import pytest
from starlette.datastructures import Headers

from gateway.admin.keys_cli import main as cli_main
from gateway.auth import (
    ANONYMOUS,
    AuthConfig,
    Authenticator,
    BudgetGuard,
    KeyService,
    generate_key,
    hash_key,
    presented_key,
    public_view,
)
from gateway.errors import (
    AuthenticationError,
    PermissionDeniedError,
    ServiceUnavailableError,
    error_response_parts,
)

# The store tests' fixtures: SQLite in tmp_path, and PostgreSQL in a schema of its own
# (marked ``postgres``, skipped with the reason when no server answers).
from tests.traffic.store.conftest import store_url
from traffic.store import StoreBackend, StoreConfig, StoreUnavailable, open_store
from traffic.store.records import ApiKeyRecord

__all__ = ["store_url"]


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def refusal(
    auth: Authenticator, presented: str, clock: FakeClock | None = None, within_s: float = 10.0
) -> PermissionDeniedError:
    """Call until the key is refused: a background re-read brought in a revocation or a spend.
    ``clock`` (a FakeClock) is moved past the cache TTL between calls."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            await auth.authenticate(presented)
        except PermissionDeniedError as exc:
            return exc
        if clock is not None:
            clock.now += 1
        await asyncio.sleep(0.01)
    raise AssertionError(f"key still accepted after {within_s}s")


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[StoreBackend]:
    backend = open_store(StoreConfig(url=store_url, connect_timeout_s=3))
    await backend.connect()
    yield backend
    await backend.close()


class FlakyStore:
    """Delegates to a real store; ``down = True`` makes key reads fail as if it were gone."""

    def __init__(self, inner: StoreBackend) -> None:
        self.inner = inner
        self.down = False
        self.reads = 0

    async def get_api_key_by_hash(self, key_hash: str) -> ApiKeyRecord | None:
        self.reads += 1
        await asyncio.sleep(0.01)  # long enough for concurrent callers to pile up
        if self.down:
            raise StoreUnavailable("connection refused")
        return await self.inner.get_api_key_by_hash(key_hash)


def test_generated_keys_are_prefixed_random_and_urlsafe() -> None:
    keys = {generate_key("sy-") for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert re.fullmatch(r"sy-[A-Za-z0-9_-]{43}", key), key
    assert hash_key("sy-abc") == hashlib.sha256(b"sy-abc").hexdigest()


async def test_key_is_shown_once_and_stored_only_as_hash(store: StoreBackend) -> None:
    service = KeyService(store)
    record, plaintext = await service.create("alice", rpm_limit=10, tpm_limit=1000, budget_usd=5)
    assert plaintext.startswith("sy-")
    assert record.key_hash == hash_key(plaintext)
    assert plaintext.startswith(record.prefix) and len(record.prefix) == len("sy-") + 6
    stored = await store.get_api_key(record.id)
    assert stored is not None
    for f in dataclasses.fields(stored):
        assert plaintext not in str(getattr(stored, f.name)), f.name
    assert stored.key_hash == record.key_hash
    (listed,) = await service.list()
    assert listed.id == record.id
    view = public_view(listed)
    assert "key_hash" not in view and plaintext not in str(view)
    assert view["rpm_limit"] == 10 and view["budget_usd"] == 5


async def test_create_refuses_bad_limits(store: StoreBackend) -> None:
    service = KeyService(store)
    with pytest.raises(ValueError, match="name"):
        await service.create("  ")
    with pytest.raises(ValueError, match="rpm_limit"):
        await service.create("x", rpm_limit=0)
    with pytest.raises(ValueError, match="budget_usd"):
        await service.create("x", budget_usd=-1)


async def test_valid_key_gives_its_principal_and_default_limits(store: StoreBackend) -> None:
    record, plaintext = await KeyService(store).create("bob", tpm_limit=500, budget_usd=2.5)
    auth = Authenticator(store, AuthConfig(default_rpm=60, default_tpm=10_000))
    principal = await auth.authenticate(plaintext)
    assert principal.key_id == record.id and principal.name == "bob"
    assert principal.rpm_limit == 60  # the key has none: the default
    assert principal.tpm_limit == 500  # the key's own
    assert principal.budget_usd == 2.5
    assert not principal.anonymous


@pytest.mark.parametrize(
    "presented", [None, "", "sy-unknown-key-000000000000", "sk-openai", "x" * 9000]
)
async def test_missing_or_unknown_key_is_401(store: StoreBackend, presented: str | None) -> None:
    auth = Authenticator(store, AuthConfig())
    with pytest.raises(AuthenticationError) as info:
        await auth.authenticate(presented)
    status, _, body = error_response_parts(info.value)
    assert status == 401
    assert body["error"]["type"] == "authentication_error"
    assert body["error"]["code"] == "invalid_api_key"
    if presented:
        assert presented not in body["error"]["message"]


async def test_revoked_key_is_403_once_the_read_after_the_cache_ttl_answers(
    store: StoreBackend,
) -> None:
    clock = FakeClock()
    service = KeyService(store)
    record, plaintext = await service.create("carol")
    auth = Authenticator(store, AuthConfig(cache_ttl_s=0.5), clock=clock)
    await auth.authenticate(plaintext)
    assert await service.revoke(record.id)
    assert not await service.revoke(record.id)  # already revoked
    clock.now += 0.4
    await auth.authenticate(plaintext)  # still trusted from the cache
    assert auth.store_reads == 1
    clock.now += 0.2  # past the TTL: answered from the cache at once, the store re-read behind
    await auth.authenticate(plaintext)
    exc = await refusal(auth, plaintext)  # the clock stands still: the re-read did it
    status, _, body = error_response_parts(exc)
    assert status == 403 and body["error"]["code"] == "key_revoked"
    assert body["error"]["type"] == "permission_error"
    assert auth.store_reads == 2


async def test_revocation_with_real_time(store: StoreBackend) -> None:
    service = KeyService(store)
    record, plaintext = await service.create("dave")
    auth = Authenticator(store, AuthConfig(cache_ttl_s=0.05))
    await auth.authenticate(plaintext)
    await service.revoke(record.id)
    await asyncio.sleep(0.06)
    await refusal(auth, plaintext, within_s=2)


async def test_max_stale_zero_reads_the_store_before_answering_past_the_ttl(
    store: StoreBackend,
) -> None:
    service = KeyService(store)
    record, plaintext = await service.create("strict")
    auth = Authenticator(store, AuthConfig(cache_ttl_s=0, max_stale_s=0))
    await auth.authenticate(plaintext)
    await service.revoke(record.id)
    with pytest.raises(PermissionDeniedError):
        await auth.authenticate(plaintext)


async def test_invalidate_makes_revocation_immediate(store: StoreBackend) -> None:
    service = KeyService(store)
    record, plaintext = await service.create("erin")
    auth = Authenticator(store, AuthConfig(cache_ttl_s=3600))
    await auth.authenticate(plaintext)
    await service.revoke(record.id)
    auth.invalidate(record.id)
    with pytest.raises(PermissionDeniedError):
        await auth.authenticate(plaintext)


async def test_cached_key_needs_no_store_round_trip(store: StoreBackend) -> None:
    _, plaintext = await KeyService(store).create("fast")
    flaky = FlakyStore(store)
    auth = Authenticator(flaky, AuthConfig(cache_ttl_s=60))  # type: ignore[arg-type]
    # Concurrent first calls share one read (single flight).
    await asyncio.gather(*(auth.authenticate(plaintext) for _ in range(20)))
    for _ in range(100):
        await auth.authenticate(plaintext)
    assert flaky.reads == 1


async def test_store_down_keeps_cached_keys_and_refuses_others_with_503(
    store: StoreBackend,
) -> None:
    clock = FakeClock()
    _, plaintext = await KeyService(store).create("stale")
    flaky = FlakyStore(store)
    auth = Authenticator(flaky, AuthConfig(cache_ttl_s=1, max_stale_s=30), clock=clock)  # type: ignore[arg-type]
    await auth.authenticate(plaintext)
    flaky.down = True
    clock.now += 10  # expired, but within max_stale_s
    reads = flaky.reads
    for _ in range(10):
        assert (await auth.authenticate(plaintext)).name == "stale"  # at once, from the cache
        await asyncio.sleep(0.02)  # the background re-read runs, and fails
    assert flaky.reads == reads + 1  # the down store is tried once per TTL, not per call
    with pytest.raises(ServiceUnavailableError) as info:
        await auth.authenticate("sy-" + "a" * 43)
    assert error_response_parts(info.value)[0] == 503
    assert info.value.code == "auth_store_unavailable"
    clock.now += 30  # beyond max_stale_s
    for _ in range(2):  # a failed read does not make the old entry fresh again
        with pytest.raises(ServiceUnavailableError):
            await auth.authenticate(plaintext)


async def test_optional_auth_lets_anonymous_through_but_not_revoked_keys(
    store: StoreBackend,
) -> None:
    service = KeyService(store)
    record, plaintext = await service.create("gina", rpm_limit=5)
    auth = Authenticator(store, AuthConfig(required=False, cache_ttl_s=0, max_stale_s=0))
    assert await auth.authenticate(None) is ANONYMOUS
    assert await auth.authenticate("sk-whatever-the-ide-sends") is ANONYMOUS
    assert await auth.authenticate("sy-" + "b" * 43) is ANONYMOUS
    assert ANONYMOUS.rpm_limit is None and ANONYMOUS.budget_usd is None and ANONYMOUS.anonymous
    assert (await auth.authenticate(plaintext)).rpm_limit == 5
    await service.revoke(record.id)
    with pytest.raises(PermissionDeniedError):
        await auth.authenticate(plaintext)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"authorization": "Bearer sy-abc"}, "sy-abc"),
        ({"Authorization": "bearer  sy-abc "}, "sy-abc"),
        ({"x-api-key": "sy-anthropic"}, "sy-anthropic"),
        ({"API-Key": "sy-azure"}, "sy-azure"),
        ({"authorization": "Basic Zm9vOmJhcg=="}, None),
        ({"authorization": "Bearer "}, None),
        ({}, None),
    ],
)
def test_presented_key_reads_the_usual_headers(
    headers: dict[str, str], expected: str | None
) -> None:
    assert presented_key(Headers(headers)) == expected


async def test_plaintext_keys_never_reach_the_logs(
    store: StoreBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    service = KeyService(store)
    record, plaintext = await service.create("secret-holder", budget_usd=0)
    auth = Authenticator(store, AuthConfig(cache_ttl_s=0), BudgetGuard(store))
    for presented in (plaintext, plaintext[:-1] + "x", None):
        with pytest.raises((AuthenticationError, PermissionDeniedError)) as info:
            await auth.authenticate(presented)
        assert plaintext not in str(info.value)
    await service.revoke(record.id)
    with pytest.raises(PermissionDeniedError):
        await auth.authenticate(plaintext)
    assert caplog.records, "expected some log lines (create, revoke)"
    for rec in caplog.records:
        assert plaintext not in rec.getMessage()
        assert record.key_hash not in rec.getMessage()
    assert plaintext not in caplog.text


def test_cli_prints_the_key_once(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--store", store_url, "create", "--name", "cli", "--rpm", "7"]) == 0
    out = capsys.readouterr().out
    key = re.search(r"key: (sy-\S+)", out)
    key_id = re.search(r"id:\s+(\S+)", out)
    assert key is not None and key_id is not None
    assert cli_main(["--store", store_url, "list"]) == 0
    listing = capsys.readouterr().out
    assert key_id.group(1) in listing and key.group(1) not in listing
    assert hash_key(key.group(1)) not in listing
    assert cli_main(["--store", store_url, "revoke", key_id.group(1)]) == 0
    assert cli_main(["--store", store_url, "revoke", key_id.group(1)]) == 1
    capsys.readouterr()
    assert cli_main(["--store", store_url, "list", "--active"]) == 0
    assert key_id.group(1) not in capsys.readouterr().out
    assert cli_main(["--store", store_url, "create", "--name", "x", "--rpm", "0"]) == 2
