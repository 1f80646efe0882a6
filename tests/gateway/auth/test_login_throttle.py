"""Wrong admin tokens per client address: five a minute, then 429 for right and wrong alike,
counted in this process and, with the Redis rate-limit backend, across the fleet."""

from __future__ import annotations

import logging

import pytest

from gateway.auth import AuthConfig, MemoryRateLimiter
from gateway.auth.login_throttle import THROTTLED_CODE, LoginThrottle
from gateway.errors import RateLimitedError, error_response_parts
from gateway.metrics import GatewayMetrics
from tests.gateway.auth.conftest import REDIS_URL

ALICE = "198.51.100.7"
BOB = "198.51.100.8"


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def memory_throttle(clock: FakeClock, metrics: GatewayMetrics | None = None) -> LoginThrottle:
    return LoginThrottle([MemoryRateLimiter(60, clock=clock)], 5, 60, metrics, clock=clock)


def sample(metrics: GatewayMetrics, name: str, surface: str) -> float:
    value = metrics.registry.get_sample_value(name, {"surface": surface})
    return value or 0.0


async def test_the_sixth_wrong_token_within_a_minute_is_refused_and_others_are_not() -> None:
    clock, metrics = FakeClock(), GatewayMetrics()
    throttle = memory_throttle(clock, metrics)
    for _ in range(5):
        await throttle.check(ALICE, "login")  # each of the five is let through to be compared
        await throttle.record_failure(ALICE, "login")
        clock.now += 1
    with pytest.raises(RateLimitedError) as info:
        await throttle.check(ALICE, "login")
    assert info.value.code == THROTTLED_CODE
    assert info.value.retry_after_s == pytest.approx(60 / 5 - 5)  # the oldest one drains
    status, headers, body = error_response_parts(info.value)
    assert status == 429 and headers == {"Retry-After": "7"}
    assert body["error"]["type"] == "rate_limit_error" and ALICE in body["error"]["message"]
    await throttle.check(BOB, "login")  # another address has its own count
    assert sample(metrics, "switchyard_admin_auth_failures_total", "login") == 5
    assert sample(metrics, "switchyard_admin_auth_throttled_total", "login") == 1


async def test_refusals_are_not_counted_so_the_address_recovers_when_promised() -> None:
    clock = FakeClock()
    throttle = memory_throttle(clock)
    for _ in range(5):
        await throttle.record_failure(ALICE, "admin_api")
    for _ in range(20):  # hammering while throttled does not extend it
        with pytest.raises(RateLimitedError):
            await throttle.check(ALICE, "admin_api")
    clock.now += 12.0  # one failure's worth drained: one more guess, then refused again
    await throttle.check(ALICE, "admin_api")
    await throttle.record_failure(ALICE, "admin_api")
    with pytest.raises(RateLimitedError):
        await throttle.check(ALICE, "admin_api")
    clock.now += 60.0
    await throttle.check(ALICE, "admin_api")


async def test_one_warning_per_address_when_its_throttling_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    throttle = memory_throttle(clock)
    for address in (ALICE, BOB):
        for _ in range(5):
            await throttle.record_failure(address, "console_bearer")
    with caplog.at_level(logging.WARNING, logger="gateway.auth.login_throttle"):
        for _ in range(3):
            for address in (ALICE, BOB):
                with pytest.raises(RateLimitedError):
                    await throttle.check(address, "console_bearer")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert sum(ALICE in line for line in lines) == 1 and sum(BOB in line for line in lines) == 1


@pytest.mark.redis
async def test_with_redis_the_count_is_the_fleets(redis_ns: str) -> None:
    """Two gateway processes (two throttles) on one Redis share one count per address."""
    config = AuthConfig(rate_limit_backend="redis", redis_url=REDIS_URL, redis_namespace=redis_ns)
    one, two = LoginThrottle.from_config(config, None), LoginThrottle.from_config(config, None)
    try:
        for _ in range(3):
            await one.record_failure(ALICE, "login")
        for _ in range(2):
            await two.record_failure(ALICE, "login")
        for throttle in (one, two):  # neither saw five, the fleet did
            with pytest.raises(RateLimitedError) as info:
                await throttle.check(ALICE, "login")
            assert 0 < info.value.retry_after_s <= 12
        await one.check(BOB, "login")
    finally:
        await one.close()
        await two.close()


async def test_with_redis_down_each_process_still_counts_its_own() -> None:
    config = AuthConfig(
        rate_limit_backend="redis", redis_url="redis://127.0.0.1:1/0", redis_timeout_s=0.2
    )
    throttle = LoginThrottle.from_config(config, None)
    try:
        for _ in range(5):
            await throttle.check(ALICE, "admin_api")  # Redis fails open: no refusal, no error
            await throttle.record_failure(ALICE, "admin_api")
        with pytest.raises(RateLimitedError):
            await throttle.check(ALICE, "admin_api")
        await throttle.check(BOB, "admin_api")
    finally:
        await throttle.close()


def test_the_limits_are_settings_with_one_default() -> None:
    assert (AuthConfig().admin_login_max_failures, AuthConfig().admin_login_window_s) == (5, 60)
    with pytest.raises(ValueError):
        AuthConfig(admin_login_max_failures=0)
