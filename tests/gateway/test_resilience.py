"""Circuit breaker and retry budget, on a fake clock."""

from __future__ import annotations

from gateway.resilience import BreakerState, CircuitBreaker, RetryBudget


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _state(b: CircuitBreaker) -> BreakerState:
    # A call, not an attribute read: mypy would otherwise keep the narrowing from
    # one assert across the calls that change the breaker's state.
    return b.state


def test_breaker_opens_after_threshold_and_half_opens_after_cooldown() -> None:
    clock = Clock()
    b = CircuitBreaker(failure_threshold=3, cooldown_s=10, clock=clock)
    for _ in range(2):
        b.record_failure()
    assert _state(b) is BreakerState.CLOSED and b.allow()
    b.record_failure()
    assert _state(b) is BreakerState.OPEN and not b.allow()
    clock.now = 10
    assert _state(b) is BreakerState.HALF_OPEN
    assert b.allow() and not b.allow()  # one probe only
    b.record_failure()
    assert _state(b) is BreakerState.OPEN
    clock.now = 20
    assert b.allow()
    b.record_success()
    assert _state(b) is BreakerState.CLOSED and b.allow()


def test_released_probe_lets_the_next_request_probe() -> None:
    clock = Clock()
    b = CircuitBreaker(1, 1, clock=clock)
    b.record_failure()
    clock.now = 1
    assert b.allow()
    b.release()
    assert b.allow()


def test_retry_budget_caps_retries_to_a_share_of_traffic() -> None:
    clock = Clock()
    budget = RetryBudget(ratio=0.25, min_per_s=0, clock=clock)
    spent = sum(budget.try_spend() for _ in range(100))
    assert spent == 10  # the initial reserve
    for _ in range(40):
        budget.record_request()
    assert sum(budget.try_spend() for _ in range(100)) == 10  # a quarter of 40 requests


def test_retry_budget_floor_refills_with_time() -> None:
    clock = Clock()
    budget = RetryBudget(ratio=0, min_per_s=5, clock=clock)
    while budget.try_spend():
        pass
    clock.now = 1
    assert sum(budget.try_spend() for _ in range(10)) == 5
