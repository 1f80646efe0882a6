"""Wrong admin tokens, throttled per client address.

Rule: after ``auth.admin_login_max_failures`` (5) wrong admin tokens within
``auth.admin_login_window_s`` (60 s) from one address, every further attempt from that address,
right token or wrong, is refused with 429 and ``Retry-After`` until the oldest failure has
drained (``window / max_failures``, 12 s); sustained, an address gets ``max_failures`` guesses
per window. Attempts are the console's login form, its ``Authorization: Bearer`` header and the
admin API's (``/admin/*``); a console session cookie is no attempt and is never throttled.

How: the rate limiter's GCRA bucket (:mod:`gateway.auth.ratelimit`), not a counter of its own,
under the synthetic key ``admin-login:<address>`` with a "tokens per window" limit of
``max_failures``. :meth:`LoginThrottle.check` is the limiter's ``check_tokens`` (a peek: refused
while the bucket holds ``max_failures``), run before the token is compared, so a throttled
address learns nothing of the token it sent; :meth:`LoginThrottle.record_failure` is its
``record_tokens(1)``.

Where the counts live: always in this process's memory; with ``auth.rate_limit_backend: redis``
also in Redis (``auth.redis_namespace``), shared by every gateway process using it, so the
fleet together allows ``max_failures`` per window and address. An attempt is refused when either
count is full. Redis unreachable: the shared count is skipped (the limiter fails open and logs
once per outage) and each process's own still holds, so a fleet of N processes allows at most
N x ``max_failures`` per window meanwhile, and admins are never locked out by a Redis outage.

Addresses: the peer the server saw (``request.client``). Behind a proxy that is the proxy, unless
the server trusts its ``X-Forwarded-For`` (uvicorn's ``--proxy-headers`` with
``--forwarded-allow-ips``): every client behind an untrusted proxy shares one count.

Seen: ``switchyard_admin_auth_failures_total`` and ``switchyard_admin_auth_throttled_total`` (by
``surface``), and one warning per address when its throttling starts (at most once a window per
address and process).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal

from gateway.auth.config import AuthConfig
from gateway.auth.keys import Principal
from gateway.auth.ratelimit import MemoryRateLimiter, RateLimiter, RedisRateLimiter
from gateway.errors import RateLimitedError
from gateway.metrics import GatewayMetrics
from gateway.redis_scripts import redis_client

log = logging.getLogger(__name__)

Surface = Literal["login", "console_bearer", "admin_api"]
KEY_PREFIX: Final = "admin-login:"
THROTTLED_CODE: Final = "admin_login_throttled"


class LoginThrottle:
    """Failed admin-token attempts per client address (see the module docstring)."""

    def __init__(
        self,
        limiters: Sequence[RateLimiter],
        max_failures: int,
        window_s: float,
        metrics: GatewayMetrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limiters = tuple(limiters)
        self._max = max_failures
        self._window = window_s
        self._metrics = metrics
        self._clock = clock
        self._announced: dict[str, float] = {}  # address -> until when its start was logged

    @classmethod
    def from_config(cls, config: AuthConfig, metrics: GatewayMetrics | None) -> LoginThrottle:
        """This process's count, and Redis's when ``config.rate_limit_backend`` is redis."""
        window = config.admin_login_window_s
        limiters: list[RateLimiter] = [MemoryRateLimiter(window)]
        if config.rate_limit_backend == "redis":
            client = redis_client(
                config.redis_url,
                timeout_s=config.redis_timeout_s,
                max_connections=config.redis_max_connections,
            )
            shared = RedisRateLimiter(
                client,
                namespace=config.redis_namespace,
                window_s=window,
                failure_mode="open",  # the process's own count still holds (module docstring)
                retry_s=config.redis_retry_s,
            )
            limiters.append(shared)
        return cls(limiters, config.admin_login_max_failures, window, metrics)

    def _principal(self, address: str) -> Principal:
        key = KEY_PREFIX + address
        return Principal(key_id=key, name=key, tpm_limit=self._max)

    async def check(self, address: str, surface: Surface) -> None:
        """RateLimitedError (429, ``Retry-After``) while ``address`` is throttled; call it before
        comparing the token it presents."""
        principal = self._principal(address)
        wait = 0.0
        for limiter in self._limiters:
            try:
                await limiter.check_tokens(principal)
            except RateLimitedError as exc:
                wait = max(wait, exc.retry_after_s)
        if wait <= 0:
            return
        if self._metrics is not None:
            self._metrics.child(self._metrics.admin_auth_throttled, surface).inc()
        self._announce(address, surface)
        raise RateLimitedError(
            f"Too many wrong admin tokens from {address}: at most {self._max} per "
            f"{self._window:g}s. Try again in {wait:.3g}s.",
            retry_after_s=wait,
            code=THROTTLED_CODE,
        )

    async def record_failure(self, address: str, surface: Surface) -> None:
        """Count one wrong token from ``address``."""
        principal = self._principal(address)
        for limiter in self._limiters:
            await limiter.record_tokens(principal, 1)
        if self._metrics is not None:
            self._metrics.child(self._metrics.admin_auth_failures, surface).inc()

    def _announce(self, address: str, surface: Surface) -> None:
        now = self._clock()
        if self._announced.get(address, -1.0) > now:
            return
        for stale in [a for a, until in self._announced.items() if until <= now]:
            del self._announced[stale]
        self._announced[address] = now + self._window
        log.warning(
            "admin token: %d wrong tokens from %s within %gs; refusing its attempts (429), "
            "first on %s",
            self._max,
            address,
            self._window,
            surface,
        )

    async def close(self) -> None:
        for limiter in self._limiters:
            await limiter.close()
