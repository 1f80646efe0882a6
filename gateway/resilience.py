"""Failure handling owned by the gateway (litellm's and the OpenAI client's retries are off).

CircuitBreaker (one per back-end)
    closed    -- every request passes; ``failure_threshold`` consecutive failures -> open.
    open      -- requests are refused without a call, for ``cooldown_s``.
    half-open -- after the cooldown one probe passes; success closes, failure re-opens.
RetryBudget (one per gateway)
    Each first attempt deposits ``ratio`` tokens; each failover spends one. A floor of
    ``min_per_s`` tokens per second keeps failover possible at low traffic. Retries therefore add at
    most ``ratio`` extra load when a back-end is down, instead of multiplying it (retry storms).
Both take a clock (``time.monotonic`` by default) so tests need no sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import IntEnum


class BreakerState(IntEnum):
    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int,
        cooldown_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._threshold = failure_threshold
        self._cooldown = cooldown_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probe_in_flight = False

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self._clock() - self._opened_at >= self._cooldown:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def allow(self) -> bool:
        """Whether a call may go to this back-end now (claims the probe when half-open)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN and not self._probe_in_flight:
            self._probe_in_flight = True
            return True
        return False

    def record_success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probe_in_flight = False

    def record_failure(self) -> None:
        self._failures += 1
        self._probe_in_flight = False
        if self._opened_at is not None or self._failures >= self._threshold:
            self._opened_at = self._clock()

    def release(self) -> None:
        """A claimed probe ended without a verdict (e.g. the client went away)."""
        self._probe_in_flight = False


class RetryBudget:
    def __init__(
        self,
        ratio: float,
        min_per_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ratio = ratio
        self._min_per_s = min_per_s
        self._clock = clock
        self._cap = max(10.0, min_per_s * 10)
        self._tokens = self._cap
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._cap, self._tokens + (now - self._last) * self._min_per_s)
        self._last = now

    def record_request(self) -> None:
        self._tokens = min(self._cap, self._tokens + self._ratio)

    def try_spend(self) -> bool:
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
