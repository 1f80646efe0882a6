"""Per-key rate limits: requests and tokens per window, in this process or shared through Redis.

Algorithm: GCRA (generic cell rate algorithm), a leaky bucket kept as one number per key and
dimension, the *theoretical arrival time* ``tat``. A limit of ``N`` per window ``W`` drains one
unit every ``T = W / N`` seconds; the bucket's level at ``now`` is ``max(0, tat - now) / T``:

    admit a cost c:  new_tat = max(tat, now) + c * T
                     allowed  iff new_tat - now <= W       (the bucket holds at most N)
                     if allowed, store new_tat; else Retry-After = new_tat - W - now

So a key may send a burst of ``N`` and then ``N`` per window sustained; after a burst the next
request is allowed ``W / N`` later, which is exactly the Retry-After given. One number per key
(no timestamp log), no window-boundary doubling, and an exact Retry-After.

Requests per minute (rpm): :meth:`RateLimiter.check_request` admits a cost of 1 and counts it
(refused requests are not counted, so a client that backs off recovers).
Tokens per minute (tpm): :meth:`check_tokens` refuses while the bucket has no room for one more
token (before the body is read); :meth:`reserve_tokens` admits the prompt's counted tokens once
they are known, before the call (refused when the prompt alone exceeds what is left); and
:meth:`record_tokens` settles after the call: the tokens it used beyond its reservation (possibly
beyond the limit: the key then waits until it has drained), or a negative amount, what it held
and did not use, given back (never below an empty bucket). :meth:`admit` does the rpm and the
first tpm check at once (one Redis round trip).

Backends: :class:`MemoryRateLimiter` (this process; idle keys pruned once per window, an idle key
holds no information) and :class:`RedisRateLimiter` (one Lua script per check, atomic, keys
``<namespace>:{<key_id>}:req|tok`` expiring when their bucket is empty; every gateway process
using the same Redis shares the counters). Redis failures follow ``redis_failure_mode``: ``open``
lets requests through (logged once per outage, counted in ``stats()["failures"]``), ``closed``
answers 429; either way Redis is skipped for ``redis_retry_s`` after a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from gateway.auth.config import (
    DEFAULT_REDIS_NAMESPACE,
    DEFAULT_REDIS_RETRY_S,
    DEFAULT_WINDOW_S,
    AuthConfig,
    FailureMode,
)
from gateway.auth.keys import Principal
from gateway.errors import RateLimitedError
from gateway.redis_scripts import ScriptRunner, redis_client

if TYPE_CHECKING:
    # Annotations only: this module is on the gateway's start-up path, where importing redis is
    # slow (docs/hot_path.md); redis is imported when a Redis client is built (redis_scripts).
    import redis.asyncio as aioredis

# Float slack so that exactly N admissions fit in a window of N (N * (W / N) may round above W).
_EPS_S: Final = 1e-6


class RateLimiter(Protocol):
    """Rate limits of a :class:`Principal`; limits of None (and anonymous principals) are free."""

    async def admit(self, principal: Principal) -> None:
        """:meth:`check_tokens` then :meth:`check_request`, at the cost of one check."""

    async def check_request(self, principal: Principal) -> None:
        """Count one request; RateLimitedError (with ``retry_after_s``) when over rpm."""

    async def check_tokens(self, principal: Principal) -> None:
        """RateLimitedError when the tokens used in the window have reached tpm."""

    async def reserve_tokens(self, principal: Principal, tokens: int) -> int:
        """Hold a prompt's ``tokens`` before its call; RateLimitedError when they do not fit in
        what is left of the window. Returns the tokens held (0: no limit, or not checked)."""
        ...

    async def record_tokens(self, principal: Principal, tokens: int) -> None:
        """Add the tokens a finished call used beyond what it held (negative: give back)."""

    def stats(self) -> dict[str, float]:
        """Counters for metrics."""
        ...

    async def close(self) -> None: ...


def gcra(tat: float, now: float, interval_s: float, cost: float) -> float:
    """The new ``tat`` after admitting ``cost`` (see the module docstring)."""
    return max(tat, now) + cost * interval_s


def _refusal(
    principal: Principal, kind: str, limit: int, window_s: float, wait_s: float
) -> RateLimitedError:
    what = "requests" if kind == "rpm" else "tokens"
    return RateLimitedError(
        f"Rate limit reached for {what} per minute ({kind}) on API key '{principal.name}': "
        f"limit {limit} per {window_s:g}s. Please try again in {wait_s:.3g}s.",
        retry_after_s=wait_s,
    )


def _too_large(
    principal: Principal, tokens: int, limit: int, window_s: float, wait_s: float
) -> RateLimitedError:
    """A prompt that does not fit in what is left of the key's token window."""
    never = " (more than the whole limit: it never fits)" if tokens > limit else ""
    return RateLimitedError(
        f"Rate limit reached for tokens per minute (tpm) on API key '{principal.name}': this "
        f"request's prompt is {tokens} tokens{never}, more than is left of the limit of "
        f"{limit} per {window_s:g}s. Please try again in {min(wait_s, window_s):.3g}s.",
        retry_after_s=min(wait_s, window_s),
    )


class MemoryRateLimiter:
    """GCRA buckets in this process's memory; for a single gateway process."""

    def __init__(
        self, window_s: float = DEFAULT_WINDOW_S, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window = window_s
        self._clock = clock
        self._requests: dict[str, float] = {}  # key id -> tat
        self._tokens: dict[str, float] = {}
        self._next_prune = clock() + window_s

    async def admit(self, principal: Principal) -> None:
        await self.check_tokens(principal)
        await self.check_request(principal)

    async def check_request(self, principal: Principal) -> None:
        limit = principal.rpm_limit
        if limit is None or principal.key_id is None:
            return
        now = self._now()
        new_tat = gcra(self._requests.get(principal.key_id, now), now, self._window / limit, 1)
        wait = new_tat - self._window - now
        if wait > _EPS_S:
            raise _refusal(principal, "rpm", limit, self._window, wait)
        self._requests[principal.key_id] = new_tat

    async def check_tokens(self, principal: Principal) -> None:
        limit = principal.tpm_limit
        if limit is None or principal.key_id is None:
            return
        now = self._now()
        new_tat = gcra(self._tokens.get(principal.key_id, now), now, self._window / limit, 1)
        wait = new_tat - self._window - now
        if wait > _EPS_S:
            raise _refusal(principal, "tpm", limit, self._window, wait)

    async def reserve_tokens(self, principal: Principal, tokens: int) -> int:
        limit = principal.tpm_limit
        if limit is None or principal.key_id is None or tokens <= 0:
            return 0
        now = self._now()
        tat = self._tokens.get(principal.key_id, now)
        new_tat = gcra(tat, now, self._window / limit, tokens)
        wait = new_tat - self._window - now
        if wait > _EPS_S:
            raise _too_large(principal, tokens, limit, self._window, wait)
        self._tokens[principal.key_id] = new_tat
        return tokens

    async def record_tokens(self, principal: Principal, tokens: int) -> None:
        limit = principal.tpm_limit
        if limit is None or principal.key_id is None or tokens == 0:
            return
        now = self._now()
        tat = self._tokens.get(principal.key_id, now)
        self._tokens[principal.key_id] = max(now, gcra(tat, now, self._window / limit, tokens))

    def stats(self) -> dict[str, float]:
        return {"tracked_keys": float(len(self._requests) + len(self._tokens))}

    async def close(self) -> None:
        self._requests.clear()
        self._tokens.clear()

    def _now(self) -> float:
        now = self._clock()
        if now >= self._next_prune:
            self._prune(now)
        return now

    def _prune(self, now: float) -> None:
        """Drop keys whose bucket is empty (tat in the past): they hold no information."""
        for buckets in (self._requests, self._tokens):
            for key_id in [k for k, tat in buckets.items() if tat <= now]:
                del buckets[key_id]
        self._next_prune = now + self._window


# KEYS: request tat, token tat. ARGV: now, window, request interval, token interval (<= 0: no
# limit), float slack. Returns {0} when admitted (the request counted), {1, wait} over rpm,
# {2, wait} over tpm. Waits are strings: Redis truncates Lua numbers to integers.
_ADMIT_LUA: Final = """
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local req_interval = tonumber(ARGV[3])
local tok_interval = tonumber(ARGV[4])
local eps = tonumber(ARGV[5])
if tok_interval > 0 then
  local tat = tonumber(redis.call('GET', KEYS[2]) or '0')
  if tat < now then tat = now end
  local wait = tat + tok_interval - window - now
  if wait > eps then return {2, tostring(wait)} end
end
if req_interval > 0 then
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  if tat < now then tat = now end
  local new_tat = tat + req_interval
  local wait = new_tat - window - now
  if wait > eps then return {1, tostring(wait)} end
  local ttl_ms = math.ceil((new_tat - now) * 1000) + 1000
  redis.call('SET', KEYS[1], string.format('%.6f', new_tat), 'PX', ttl_ms)
end
return {0, '0'}
"""

# KEYS: token tat. ARGV: now, token interval, tokens (negative: given back).
_RECORD_LUA: Final = """
local now = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + tonumber(ARGV[2]) * tonumber(ARGV[3])
if new_tat <= now then
  redis.call('DEL', KEYS[1])
  return 0
end
local ttl_ms = math.ceil((new_tat - now) * 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.6f', new_tat), 'PX', ttl_ms)
return 0
"""

# KEYS: token tat. ARGV: now, window, token interval, tokens, float slack. Returns {0} when
# held, {1, wait} when the tokens do not fit in what is left of the window.
_RESERVE_LUA: Final = """
local now = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + tonumber(ARGV[3]) * tonumber(ARGV[4])
local wait = new_tat - tonumber(ARGV[2]) - now
if wait > tonumber(ARGV[5]) then return {1, tostring(wait)} end
local ttl_ms = math.ceil((new_tat - now) * 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.6f', new_tat), 'PX', ttl_ms)
return {0, '0'}
"""


class RedisRateLimiter:
    """GCRA buckets in Redis, shared by every gateway process that uses the same namespace."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        namespace: str = DEFAULT_REDIS_NAMESPACE,
        window_s: float = DEFAULT_WINDOW_S,
        failure_mode: FailureMode = "open",
        retry_s: float = DEFAULT_REDIS_RETRY_S,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ns = namespace
        self._window = window_s
        self._failure_mode = failure_mode
        # Wall clock: the buckets are shared between processes (keep hosts in NTP sync).
        self._clock = clock
        self._scripts = ScriptRunner(
            client, f"rate limiter (failing {failure_mode})", retry_s=retry_s, monotonic=monotonic
        )
        self._admit = self._scripts.register(_ADMIT_LUA)
        self._record = self._scripts.register(_RECORD_LUA)
        self._reserve = self._scripts.register(_RESERVE_LUA)

    @property
    def failures(self) -> int:
        return self._scripts.failures

    @classmethod
    def from_config(cls, config: AuthConfig) -> RedisRateLimiter:
        client = redis_client(
            config.redis_url,
            timeout_s=config.redis_timeout_s,
            max_connections=config.redis_max_connections,
        )
        return cls(
            client,
            namespace=config.redis_namespace,
            window_s=config.window_s,
            failure_mode=config.redis_failure_mode,
            retry_s=config.redis_retry_s,
        )

    async def admit(self, principal: Principal) -> None:
        await self._check(principal, principal.rpm_limit, principal.tpm_limit)

    async def check_request(self, principal: Principal) -> None:
        await self._check(principal, principal.rpm_limit, None)

    async def check_tokens(self, principal: Principal) -> None:
        await self._check(principal, None, principal.tpm_limit)

    async def reserve_tokens(self, principal: Principal, tokens: int) -> int:
        limit = principal.tpm_limit
        if limit is None or principal.key_id is None or tokens <= 0:
            return 0
        args = (
            repr(self._clock()),
            repr(self._window),
            repr(self._window / limit),
            str(tokens),
            repr(_EPS_S),
        )
        key = self._key(principal.key_id, "tok")
        result = await self._scripts.call(self._reserve, [key], args)
        if result is None:
            self._unavailable()
            return 0  # open: let through, its tokens recorded after the call
        if int(result[0]) == 1:
            raise _too_large(principal, tokens, limit, self._window, float(result[1]))
        return tokens

    async def record_tokens(self, principal: Principal, tokens: int) -> None:
        limit = principal.tpm_limit
        if limit is None or principal.key_id is None or tokens == 0:
            return
        args = (repr(self._clock()), repr(self._window / limit), str(tokens))
        await self._scripts.call(self._record, [self._key(principal.key_id, "tok")], args)

    def stats(self) -> dict[str, float]:
        return {"failures": float(self.failures), "redis_down": float(self._scripts.down)}

    async def close(self) -> None:
        await self._scripts.close()

    async def _check(self, principal: Principal, rpm: int | None, tpm: int | None) -> None:
        if principal.key_id is None or (rpm is None and tpm is None):
            return
        keys = [self._key(principal.key_id, "req"), self._key(principal.key_id, "tok")]
        args = (
            repr(self._clock()),
            repr(self._window),
            repr(self._window / rpm if rpm else 0.0),
            repr(self._window / tpm if tpm else 0.0),
            repr(_EPS_S),
        )
        result = await self._scripts.call(self._admit, keys, args)
        if result is None:
            self._unavailable()
            return
        status, wait = int(result[0]), float(result[1])
        if status == 1 and rpm is not None:
            raise _refusal(principal, "rpm", rpm, self._window, wait)
        if status == 2 and tpm is not None:
            raise _refusal(principal, "tpm", tpm, self._window, wait)

    def _unavailable(self) -> None:
        """Redis did not answer: 429 when failing closed; nothing (let through) when open."""
        if self._failure_mode == "closed":
            raise RateLimitedError(
                "Rate limits cannot be checked right now; retry shortly.",
                retry_after_s=max(self._scripts.retry_s, 1.0),
                code="rate_limiter_unavailable",
            )

    def _key(self, key_id: str, kind: str) -> str:
        # The {hash tag} keeps both keys of one API key in one Redis Cluster slot.
        return f"{self._ns}:{{{key_id}}}:{kind}"


def build_rate_limiter(config: AuthConfig) -> RateLimiter:
    """The limiter ``config.rate_limit_backend`` names."""
    if config.rate_limit_backend == "redis":
        return RedisRateLimiter.from_config(config)
    return MemoryRateLimiter(config.window_s)
