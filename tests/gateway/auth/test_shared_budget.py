"""Fleet budgets in Redis: reserved before a call, settled after it, atomically; two processes'
guards (two gateways) on one Redis never admit calls past a budget beyond the calls in flight."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.auth.keys import Principal
from gateway.auth.shared_budget import SharedBudget
from gateway.errors import PermissionDeniedError
from gateway.redis_scripts import redis_client
from tests.gateway.auth.conftest import REDIS_URL


def gateway(ns: str, member: str, ttl_s: float = 60.0) -> SharedBudget:
    client = redis_client(REDIS_URL, timeout_s=1.0, max_connections=16)
    return SharedBudget(client, namespace=ns, member_id=member, reservation_ttl_s=ttl_s, retry_s=1)


def key(budget: float) -> Principal:
    return Principal(key_id=f"k-{uuid.uuid4().hex[:6]}", name="team", budget_usd=budget)


@pytest.mark.redis
async def test_two_gateways_overshoot_by_at_most_the_calls_in_flight(redis_ns: str) -> None:
    one, two = gateway(redis_ns, "one"), gateway(redis_ns, "two")
    principal = key(budget=1.0)
    cost = 0.1
    in_flight = 8
    admitted = 0

    async def caller(budget: SharedBudget) -> None:
        nonlocal admitted
        while True:
            try:
                held = await budget.reserve(principal, 0.0)
            except PermissionDeniedError:
                return
            admitted += 1
            await asyncio.sleep(0.005)  # the call
            await budget.settle(principal.key_id or "", held, cost)

    try:
        await asyncio.gather(*(caller(b) for b in [one, two] * (in_flight // 2)))
        spent = await one.spent(principal.key_id or "")
    finally:
        await one.close()
        await two.close()
    assert spent == pytest.approx(admitted * cost)
    assert 1.0 <= spent <= 1.0 + in_flight * cost
    # Once calls have a cost, they reserve it: the in-flight overshoot shrinks to a call or so.
    assert spent <= 1.0 + 2 * cost


@pytest.mark.redis
async def test_a_refusal_counts_calls_in_flight_and_says_so(redis_ns: str) -> None:
    budget = gateway(redis_ns, "one")
    principal = key(budget=0.25)
    try:
        first = await budget.reserve(principal, 0.0)
        await budget.settle(principal.key_id or "", first, 0.2)  # the mean is 0.2 now
        held = await budget.reserve(principal, 0.0)  # 0.2 spent + 0.2 held
        with pytest.raises(PermissionDeniedError) as refused:
            await budget.reserve(principal, 0.0)
        assert refused.value.code == "budget_exceeded"
        assert "held by calls in flight" in refused.value.message
        await budget.settle(principal.key_id or "", held, 0.01)  # released: room again
        assert await budget.reserve(principal, 0.0) is not None
    finally:
        await budget.close()


@pytest.mark.redis
async def test_a_counted_call_holds_its_input_cost_plus_what_calls_cost_beyond_their_input(
    redis_ns: str,
) -> None:
    budget = gateway(redis_ns, "one")
    principal = key(budget=1.0)
    key_id = principal.key_id or ""
    try:
        first = await budget.reserve(principal, 0.0, input_usd=0.3)
        assert first is not None and first.input_usd == 0.3
        await budget.settle(key_id, first, 0.4)  # 0.3 of input, 0.1 beyond it
        second = await budget.reserve(principal, 0.0, input_usd=0.5)  # holds 0.5 + 0.1
        with pytest.raises(PermissionDeniedError) as refused:  # 0.4 spent + 0.6 held: full
            await budget.reserve(principal, 0.0, input_usd=0.0)
        assert "spent $0.40, $0.60 held by calls in flight" in refused.value.message
        await budget.settle(key_id, second, 0.5)  # released: 0.9 spent, room again
        assert await budget.reserve(principal, 0.0, input_usd=0.0) is not None
    finally:
        await budget.close()


@pytest.mark.redis
async def test_a_dead_gateways_reservations_expire(redis_ns: str) -> None:
    dead, alive = gateway(redis_ns, "dead", ttl_s=0.2), gateway(redis_ns, "alive")
    principal = key(budget=0.3)
    try:
        first = await alive.reserve(principal, 0.0)
        await alive.settle(principal.key_id or "", first, 0.1)
        await dead.reserve(principal, 0.0)
        await dead.reserve(principal, 0.0)  # 0.1 spent + 0.2 held: full
        with pytest.raises(PermissionDeniedError):
            await alive.reserve(principal, 0.0)
        await asyncio.sleep(0.3)  # "dead" never settles; its holds expire
        assert await alive.reserve(principal, 0.0) is not None
    finally:
        await dead.close()
        await alive.close()


@pytest.mark.redis
async def test_the_store_spend_is_a_floor_for_a_redis_that_lost_it(redis_ns: str) -> None:
    budget = gateway(redis_ns, "one")
    principal = key(budget=1.0)
    try:
        with pytest.raises(PermissionDeniedError):
            await budget.reserve(principal, 1.5)  # the store knows 1.5 was spent
        assert await budget.spent(principal.key_id or "") == 1.5
    finally:
        await budget.close()


async def test_unreachable_redis_answers_none_once_logged_and_skipped() -> None:
    client = redis_client("redis://127.0.0.1:1/0", timeout_s=0.2, max_connections=2)
    budget = SharedBudget(client, namespace="x", member_id="m", reservation_ttl_s=1, retry_s=60)
    try:
        for _ in range(5):
            assert await budget.reserve(key(budget=1.0), 0.0) is None
        assert budget.stats()["shared_failures"] == 1  # skipped for retry_s after a failure
        assert budget.stats()["shared_down"] == 1
    finally:
        await budget.close()
