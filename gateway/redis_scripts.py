"""Redis Lua scripts run on the request path, with one policy for Redis being unreachable.

Used by the shared rate limits (:mod:`gateway.auth.ratelimit`) and the shared budget
reservations (:mod:`gateway.auth.shared_budget`): a failed call is counted, logged once per
outage (with the caller's ``what``), and Redis is then skipped for ``retry_s`` (each call answers
None at once), so an outage does not add a timeout to every request. The caller decides what
None means (pass, refuse, or fall back to local enforcement).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.commands.core import AsyncScript

log = logging.getLogger(__name__)


def redis_error() -> type[Exception]:
    """redis's base error class, imported when asked for (see :func:`redis_client`): what code
    that holds a Redis client catches."""
    from redis.exceptions import RedisError

    return RedisError


def redis_client(url: str, *, timeout_s: float, max_connections: int) -> aioredis.Redis:
    """A client for request-path scripts: a blocking pool (under a burst, calls wait briefly
    for a connection instead of failing at once), one timeout at most, no retries inside."""
    # Imported here, not at module level: this module is on the gateway's start-up path
    # (`import gateway.app`), where importing redis is slow (docs/hot_path.md); only Redis
    # features get here.
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )
    return aioredis.Redis(connection_pool=pool)


class ScriptRunner:
    """Runs registered scripts; None when Redis failed or is being skipped after a failure."""

    def __init__(
        self,
        client: aioredis.Redis,
        what: str,
        *,
        retry_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        # Kept on the instance: each call does not pay for an import statement.
        self.redis_error = redis_error()
        self.client = client
        self._what = what
        self.retry_s = retry_s
        self._monotonic = monotonic
        self._skip_until = -math.inf
        self.down = False
        self.failures = 0

    def register(self, source: str) -> AsyncScript:
        return self.client.register_script(source)

    async def call(self, script: AsyncScript, keys: list[str], args: tuple[str, ...]) -> Any:
        if self._monotonic() < self._skip_until:
            return None
        try:
            result = await script(keys=keys, args=args)
        except self.redis_error as exc:
            self.failures += 1
            self._skip_until = self._monotonic() + self.retry_s
            if not self.down:
                # The exception text names host and port, never the URL's password.
                log.warning("%s: Redis unavailable (%s: %s)", self._what, type(exc).__name__, exc)
            self.down = True
            return None
        if self.down:
            log.info("%s: Redis reachable again", self._what)
            self.down = False
        return result

    async def close(self) -> None:
        await self.client.aclose()
