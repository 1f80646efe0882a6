"""Per-key rate limits (GCRA): requests and tokens per window, in memory and shared via Redis."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
import redis.asyncio as aioredis

from gateway.auth import (
    ANONYMOUS,
    AuthConfig,
    MemoryRateLimiter,
    Principal,
    RedisRateLimiter,
    build_rate_limiter,
)
from gateway.errors import RateLimitedError, error_response_parts
from tests.gateway.auth.conftest import REDIS_URL


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def key(rpm: int | None = None, tpm: int | None = None, key_id: str = "k1") -> Principal:
    return Principal(key_id=key_id, name=f"name-{key_id}", rpm_limit=rpm, tpm_limit=tpm)


# --- memory ---------------------------------------------------------------------------------


async def test_rpm_allows_a_burst_then_refuses_with_the_exact_retry_after() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(60, clock=clock)
    p = key(rpm=3)
    for _ in range(3):
        await limiter.check_request(p)
    with pytest.raises(RateLimitedError) as info:
        await limiter.check_request(p)
    assert info.value.retry_after_s == pytest.approx(20)  # one slot drains every 60 / 3 s
    status, headers, body = error_response_parts(info.value)
    assert status == 429 and headers == {"Retry-After": "20"}
    assert body["error"]["type"] == "rate_limit_error"
    assert body["error"]["code"] == "rate_limit_exceeded"
    assert "requests per minute" in body["error"]["message"]
    clock.now += 19.9
    with pytest.raises(RateLimitedError):
        await limiter.check_request(p)  # refused calls are not counted ...
    clock.now += 0.1
    await limiter.check_request(p)  # ... so the slot opens when promised
    with pytest.raises(RateLimitedError):
        await limiter.check_request(p)


async def test_rpm_sustained_rate_and_independent_keys() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(60, clock=clock)
    a, b = key(rpm=60, key_id="a"), key(rpm=60, key_id="b")
    for _ in range(60):
        await limiter.check_request(a)
    await limiter.check_request(b)  # another key has its own bucket
    admitted = 0
    for _ in range(120):  # a minute more, at twice the allowed rate
        clock.now += 0.5
        try:
            await limiter.check_request(a)
            admitted += 1
        except RateLimitedError:
            pass
    assert admitted == 60  # 60 per minute sustained, once the burst of 60 is spent


async def test_tpm_checks_before_and_records_after() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(60, clock=clock)
    p = key(tpm=1000)
    await limiter.check_tokens(p)
    await limiter.record_tokens(p, 700)
    await limiter.check_tokens(p)  # 700 used, room left
    await limiter.record_tokens(p, 600)  # a call may go beyond: 1300 used
    with pytest.raises(RateLimitedError) as info:
        await limiter.check_tokens(p)
    # 300 tokens over, plus one of room: 301 * 60 / 1000 s
    assert info.value.retry_after_s == pytest.approx(301 * 0.06)
    assert "tokens per minute" in info.value.message
    clock.now += 18.06
    await limiter.check_tokens(p)


async def test_admit_over_tpm_does_not_count_the_request() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(60, clock=clock)
    p = key(rpm=2, tpm=10)
    await limiter.admit(p)
    await limiter.record_tokens(p, 10)
    with pytest.raises(RateLimitedError):
        await limiter.admit(p)
    clock.now += 6  # one token drained (60 s / 10); the refused request took no rpm slot
    await limiter.admit(p)
    with pytest.raises(RateLimitedError):
        await limiter.check_request(p)


async def test_no_limits_and_anonymous_are_free_and_leave_no_state() -> None:
    limiter = MemoryRateLimiter(60)
    for _ in range(1000):
        await limiter.admit(ANONYMOUS)
        await limiter.admit(key())
        await limiter.record_tokens(key(), 10_000)
    assert limiter.stats()["tracked_keys"] == 0


async def test_memory_limiter_prunes_idle_keys() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(60, clock=clock)
    for i in range(500):
        p = key(rpm=100, tpm=100, key_id=f"k{i}")
        await limiter.admit(p)
        await limiter.record_tokens(p, 5)
    assert limiter.stats()["tracked_keys"] == 1000
    clock.now += 61  # every bucket drained; the next call prunes
    await limiter.admit(key(rpm=100, key_id="fresh"))
    assert limiter.stats()["tracked_keys"] == 1


async def test_build_rate_limiter_follows_the_config() -> None:
    assert isinstance(build_rate_limiter(AuthConfig()), MemoryRateLimiter)
    limiter = build_rate_limiter(AuthConfig(rate_limit_backend="redis"))
    assert isinstance(limiter, RedisRateLimiter)
    await limiter.close()


def test_config_rejects_bad_values_without_echoing_secrets() -> None:
    with pytest.raises(ValueError, match="redis_url") as info:
        AuthConfig(redis_url="http://:hunter2@host")
    assert "hunter2" not in str(info.value).split("input_value")[0]
    with pytest.raises(ValueError, match="key_prefix"):
        AuthConfig(key_prefix="sy key")
    with pytest.raises(ValueError):
        AuthConfig(unknown_field=1)  # type: ignore[call-arg]


# --- Redis ----------------------------------------------------------------------------------


def redis_limiter(ns: str, clock: FakeClock, **kw: object) -> RedisRateLimiter:
    client = aioredis.Redis.from_url(REDIS_URL, socket_timeout=1)
    return RedisRateLimiter(client, namespace=ns, window_s=60, clock=clock, **kw)  # type: ignore[arg-type]


@pytest.mark.redis
async def test_two_gateway_processes_share_request_counters(redis_ns: str) -> None:
    clock = FakeClock()
    one, two = redis_limiter(redis_ns, clock), redis_limiter(redis_ns, clock)
    p = key(rpm=3)
    try:
        await one.check_request(p)
        await two.check_request(p)
        await one.check_request(p)
        with pytest.raises(RateLimitedError) as info:
            await two.check_request(p)
        assert info.value.retry_after_s == pytest.approx(20, abs=1e-3)
        clock.now += 20
        await two.admit(p)
        with pytest.raises(RateLimitedError):
            await one.admit(p)
    finally:
        await one.close()
        await two.close()


@pytest.mark.redis
async def test_two_gateway_processes_share_token_counters(redis_ns: str) -> None:
    clock = FakeClock()
    one, two = redis_limiter(redis_ns, clock), redis_limiter(redis_ns, clock)
    p = key(rpm=100, tpm=1000)
    try:
        await one.admit(p)
        await one.record_tokens(p, 1300)
        with pytest.raises(RateLimitedError) as info:
            await two.admit(p)
        assert info.value.retry_after_s == pytest.approx(301 * 0.06, abs=1e-3)
        with pytest.raises(RateLimitedError):
            await two.check_tokens(p)
        await two.check_request(p)  # the request dimension alone still has room
        clock.now += 18.1
        await two.admit(p)
    finally:
        await one.close()
        await two.close()


@pytest.mark.redis
async def test_concurrent_checks_from_two_processes_are_atomic(redis_ns: str) -> None:
    clock = FakeClock()
    one, two = redis_limiter(redis_ns, clock), redis_limiter(redis_ns, clock)
    p = key(rpm=100)

    async def admitted(limiter: RedisRateLimiter) -> bool:
        try:
            await limiter.admit(p)
        except RateLimitedError:
            return False
        return True

    try:
        results = await asyncio.gather(*(admitted(lim) for lim in [one, two] * 60))
        assert sum(results) == 100  # no lost update between the 120 concurrent checks
        assert one.failures == two.failures == 0
    finally:
        await one.close()
        await two.close()


@pytest.mark.redis
async def test_redis_keys_are_namespaced_and_expire(redis_ns: str) -> None:
    clock = FakeClock()
    limiter = redis_limiter(redis_ns, clock)
    p = key(rpm=60, tpm=6000, key_id="exp")
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await limiter.admit(p)
        await limiter.record_tokens(p, 100)
        names = sorted([k.decode() async for k in client.scan_iter(match=f"{redis_ns}:*")])
        assert names == [f"{redis_ns}:{{exp}}:req", f"{redis_ns}:{{exp}}:tok"]
        for name in names:
            ttl_ms = await client.pttl(name)
            assert 0 < ttl_ms <= 2000  # one second of bucket, plus a second of margin
    finally:
        await client.aclose()
        await limiter.close()


@pytest.mark.redis
async def test_redis_limiter_with_the_real_clock(redis_ns: str) -> None:
    limiter = RedisRateLimiter(aioredis.Redis.from_url(REDIS_URL), namespace=redis_ns, window_s=60)
    p = key(rpm=5, key_id=uuid.uuid4().hex)
    try:
        for _ in range(5):
            await limiter.admit(p)
        with pytest.raises(RateLimitedError) as info:
            await limiter.admit(p)
        assert 11 < info.value.retry_after_s <= 12
    finally:
        await limiter.close()


async def test_redis_down_fails_open_with_one_warning_and_a_counter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    config = AuthConfig(
        rate_limit_backend="redis",
        redis_url="redis://:hunter2@127.0.0.1:1/0",  # nothing listens on port 1
        redis_timeout_s=0.2,
        redis_retry_s=60,
    )
    limiter = RedisRateLimiter.from_config(config)
    p = key(rpm=1, tpm=1)
    try:
        for _ in range(5):
            await limiter.admit(p)  # open: passes
            await limiter.record_tokens(p, 10)
        assert limiter.failures == 1  # later calls skip Redis for redis_retry_s
        assert limiter.stats()["redis_down"] == 1
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "Redis unavailable" in warnings[0].getMessage()
        assert "hunter2" not in caplog.text
    finally:
        await limiter.close()


async def test_redis_down_fails_closed_when_configured() -> None:
    config = AuthConfig(
        rate_limit_backend="redis",
        redis_url="redis://127.0.0.1:1/0",
        redis_timeout_s=0.2,
        redis_failure_mode="closed",
    )
    limiter = RedisRateLimiter.from_config(config)
    try:
        with pytest.raises(RateLimitedError) as info:
            await limiter.admit(key(rpm=100))
        assert info.value.code == "rate_limiter_unavailable"
        assert info.value.retry_after_s >= 1
        await limiter.admit(key())  # no limits: Redis is not needed
    finally:
        await limiter.close()


# --- prompt tokens held before the call -----------------------------------------------------


Limiter = MemoryRateLimiter | RedisRateLimiter


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def token_limiter(request: pytest.FixtureRequest) -> tuple[Limiter, FakeClock]:
    """A limiter of each kind on a fake clock (the test closes it)."""
    clock = FakeClock()
    if request.param == "memory":
        return MemoryRateLimiter(60, clock=clock), clock
    return redis_limiter(request.getfixturevalue("redis_ns"), clock), clock


async def test_a_prompt_larger_than_what_is_left_of_the_window_is_refused_with_its_wait(
    token_limiter: tuple[Limiter, FakeClock],
) -> None:
    limiter, clock = token_limiter
    p = key(tpm=1000)
    try:
        await _refuses_what_does_not_fit(limiter, clock, p)
    finally:
        await limiter.close()


async def _refuses_what_does_not_fit(limiter: Limiter, clock: FakeClock, p: Principal) -> None:
    assert await limiter.reserve_tokens(p, 600) == 600
    await limiter.check_tokens(p)  # 400 left: the door's first check lets a request in ...
    with pytest.raises(RateLimitedError) as info:
        await limiter.reserve_tokens(p, 500)  # ... but not a prompt of 500
    assert info.value.retry_after_s == pytest.approx(100 * 0.06, abs=1e-3)  # 100 must drain
    assert "prompt is 500 tokens" in info.value.message
    assert await limiter.reserve_tokens(p, 400) == 400  # the refusal held nothing
    clock.now += 6.01
    with pytest.raises(RateLimitedError, match="never fits") as never:
        await limiter.reserve_tokens(p, 1001)
    assert never.value.retry_after_s <= 60


async def test_settling_adds_only_what_the_call_used_beyond_its_hold_or_gives_the_rest_back(
    token_limiter: tuple[Limiter, FakeClock],
) -> None:
    limiter, _ = token_limiter
    try:
        await _settles(limiter, key(tpm=1000))
    finally:
        await limiter.close()


async def _settles(limiter: Limiter, p: Principal) -> None:
    await limiter.reserve_tokens(p, 800)
    await limiter.record_tokens(p, 50)  # used 850: the prompt's 800 are not counted twice
    with pytest.raises(RateLimitedError):
        await limiter.reserve_tokens(p, 200)
    await limiter.record_tokens(p, -850)  # a call that held 850 and used none gives them back
    assert await limiter.reserve_tokens(p, 1000) == 1000  # the whole window again
    await limiter.record_tokens(p, -5000)  # never below an empty bucket
    assert await limiter.reserve_tokens(p, 1000) == 1000
    with pytest.raises(RateLimitedError):
        await limiter.reserve_tokens(p, 1)


async def test_keys_without_a_token_limit_hold_nothing() -> None:
    limiter = MemoryRateLimiter(60)
    assert await limiter.reserve_tokens(key(rpm=5), 10_000) == 0
    assert await limiter.reserve_tokens(ANONYMOUS, 10_000) == 0
    assert limiter.stats()["tracked_keys"] == 0
