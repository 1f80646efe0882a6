"""USD budgets: enforced at once from recorded cost, persisted to the store off the request path."""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import AsyncIterator

import pytest

from gateway.auth import AuthConfig, Authenticator, BudgetGuard, KeyService, Principal
from gateway.errors import PermissionDeniedError, error_response_parts
from tests.traffic.store.conftest import store_url
from traffic.store import StoreBackend, StoreConfig, StoreDataError, StoreUnavailable, open_store
from traffic.store.records import ApiKeyRecord

from .test_keys import refusal

__all__ = ["store_url"]


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[StoreBackend]:
    backend = open_store(StoreConfig(url=store_url, connect_timeout_s=3))
    await backend.connect()
    yield backend
    await backend.close()


async def stored_spend(store: StoreBackend, key_id: str) -> float:
    record = await store.get_api_key(key_id)
    assert record is not None
    return record.spent_usd


async def test_budget_is_enforced_at_once_from_recorded_cost(store: StoreBackend) -> None:
    record, plaintext = await KeyService(store).create("spender", budget_usd=1.0)
    guard = BudgetGuard(store, flush_interval_s=3600)  # no background flush during the test
    auth = Authenticator(store, AuthConfig(cache_ttl_s=3600), guard)
    principal = await auth.authenticate(plaintext)
    guard.record_spend(principal.key_id, 0.6)
    await auth.authenticate(plaintext)  # 0.6 < 1.0
    guard.record_spend(principal.key_id, 0.5)
    with pytest.raises(PermissionDeniedError) as info:
        await auth.authenticate(plaintext)  # refused before anything reached the store
    status, _, body = error_response_parts(info.value)
    assert status == 403 and body["error"]["code"] == "budget_exceeded"
    assert await stored_spend(store, record.id) == 0.0
    await guard.flush()
    assert await stored_spend(store, record.id) == pytest.approx(1.1)
    assert guard.spent(record.id) == pytest.approx(1.1)  # no double count after the flush
    with pytest.raises(PermissionDeniedError):
        guard.check(principal)
    await guard.close()


@pytest.mark.parametrize(
    ("budget", "spent", "shown"),
    [
        (0.0005, 0.0006, "budget of $0.0005 (spent $0.0006)"),
        (0.01, 0.0123456, "budget of $0.01 (spent $0.0123)"),
        (0.000001, 0.0000015, "budget of $0.000001 (spent $0.0000015)"),
        (2.5, 3.0, "budget of $2.50 (spent $3.00)"),
        (1500, 1500.004, "budget of $1,500.00 (spent $1,500.00)"),
    ],
)
async def test_budget_refusal_shows_small_amounts_readably(
    budget: float, spent: float, shown: str
) -> None:
    guard = BudgetGuard(FakeStore(), flush_interval_s=3600)  # type: ignore[arg-type]
    guard.record_spend("k", spent)
    with pytest.raises(PermissionDeniedError) as info:
        guard.check(Principal(key_id="k", name="tiny", budget_usd=budget))
    message = error_response_parts(info.value)[2]["error"]["message"]
    assert shown in message
    assert not re.search(r"\$0\.00(?!\d)", message)  # never "$0.00 (spent $0.00)"
    await guard.close()


async def test_spend_is_persisted_in_the_background_and_on_close(store: StoreBackend) -> None:
    record, _ = await KeyService(store).create("bg", budget_usd=10)
    guard = BudgetGuard(store, flush_interval_s=0.02)
    for _ in range(50):
        guard.record_spend(record.id, 0.01)
    for _ in range(200):
        if await stored_spend(store, record.id) == pytest.approx(0.5):
            break
        await asyncio.sleep(0.01)
    assert await stored_spend(store, record.id) == pytest.approx(0.5)
    assert guard.stats.flushes < 50  # batched per key
    guard.record_spend(record.id, 0.25)
    await guard.close()  # the last amount is flushed by close
    assert await stored_spend(store, record.id) == pytest.approx(0.75)
    assert guard.spent(record.id) == pytest.approx(0.75)


async def test_spend_of_another_process_is_seen_after_the_cache_ttl(store: StoreBackend) -> None:
    record, plaintext = await KeyService(store).create("shared", budget_usd=1.0)
    guard_a = BudgetGuard(store, flush_interval_s=3600)
    guard_b = BudgetGuard(store, flush_interval_s=3600)
    auth_b = Authenticator(store, AuthConfig(cache_ttl_s=0.05), guard_b)
    await auth_b.authenticate(plaintext)
    guard_a.record_spend(record.id, 1.5)
    await guard_a.flush()  # process A persisted its spend
    await asyncio.sleep(0.06)
    exc = await refusal(auth_b, plaintext, within_s=2)  # B re-read the key and its spend
    assert exc.code == "budget_exceeded"
    await guard_a.close()
    await guard_b.close()


async def test_budget_persists_across_restarts(store: StoreBackend) -> None:
    record, plaintext = await KeyService(store).create("restart", budget_usd=0.3)
    guard = BudgetGuard(store, flush_interval_s=3600)
    guard.record_spend(record.id, 0.3)
    await guard.close()
    fresh = BudgetGuard(store)
    auth = Authenticator(store, AuthConfig(), fresh)
    with pytest.raises(PermissionDeniedError):
        await auth.authenticate(plaintext)
    await fresh.close()


async def test_no_budget_and_ignored_amounts(store: StoreBackend) -> None:
    record, _ = await KeyService(store).create("free")
    guard = BudgetGuard(store, flush_interval_s=3600)
    for usd in (None, 0.0, -1.0, math.nan, math.inf):
        guard.record_spend(record.id, usd)
    guard.record_spend(None, 5.0)  # anonymous
    assert guard.spent(record.id) == 0.0
    guard.record_spend(record.id, 100.0)
    guard.check(Principal(key_id=record.id, name="free"))  # no budget: never refused
    await guard.close()


class FakeStore:
    """add_spend with a programmable failure; keeps totals like the real store."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {"k": 0.0}
        self.fail: Exception | None = None
        self.calls = 0

    async def add_spend(self, key_id: str, usd: float) -> float | None:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        if key_id not in self.totals:
            return None
        self.totals[key_id] += usd
        return self.totals[key_id]


def key_record(spent: float) -> ApiKeyRecord:
    return ApiKeyRecord(id="k", name="k", key_hash="h", prefix="sy-", spent_usd=spent)


async def test_store_unavailable_keeps_spend_pending_and_retries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore()
    guard = BudgetGuard(store, flush_interval_s=3600)  # type: ignore[arg-type]
    guard.record_spend("k", 0.4)
    store.fail = StoreUnavailable("gone")
    with caplog.at_level(logging.WARNING):
        await guard.flush()
        await guard.flush()
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1
    assert guard.spent("k") == pytest.approx(0.4)  # still enforced while the store is down
    store.fail = None
    await guard.flush()
    assert store.totals["k"] == pytest.approx(0.4)
    assert guard.spent("k") == pytest.approx(0.4)
    await guard.close()


async def test_refused_or_unknown_spend_is_dropped_not_retried() -> None:
    store = FakeStore()
    guard = BudgetGuard(store, flush_interval_s=3600)  # type: ignore[arg-type]
    guard.record_spend("gone-key", 1.0)
    await guard.flush()
    store.fail = StoreDataError("bad")
    guard.record_spend("k", 1.0)
    await guard.flush()
    calls = store.calls
    await guard.flush()
    assert store.calls == calls  # nothing left to send
    await guard.close()


async def test_an_older_read_never_replaces_a_newer_total() -> None:
    now = [10.0]
    store = FakeStore()
    guard = BudgetGuard(store, flush_interval_s=3600, clock=lambda: now[0])  # type: ignore[arg-type]
    store.totals["k"] = 2.0  # other processes spent 2.0
    guard.record_spend("k", 0.5)
    now[0] = 11.0
    await guard.flush()  # the store answers 2.5 at t=11
    assert guard.spent("k") == pytest.approx(2.5)
    guard.observe(key_record(0.0), read_at=10.5)  # a read issued before the flush answered
    assert guard.spent("k") == pytest.approx(2.5)
    guard.observe(key_record(3.0), read_at=12.0)  # a newer read wins
    assert guard.spent("k") == pytest.approx(3.0)
    await guard.close()


async def test_close_keeps_pending_spend_when_cancelled_mid_flush() -> None:
    store = FakeStore()
    guard = BudgetGuard(store, flush_interval_s=0.01)  # type: ignore[arg-type]
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow_add_spend(key_id: str, usd: float) -> float | None:
        started.set()
        await release.wait()
        return await FakeStore.add_spend(store, key_id, usd)

    store.add_spend = slow_add_spend  # type: ignore[method-assign]
    guard.record_spend("k", 0.7)
    await started.wait()
    closing = asyncio.create_task(guard.close())  # waits for the flush in progress
    await asyncio.sleep(0.02)
    assert not closing.done()
    release.set()
    await closing
    assert store.totals["k"] == pytest.approx(0.7)
    assert guard.spent("k") == pytest.approx(0.7)
