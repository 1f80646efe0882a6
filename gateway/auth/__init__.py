"""Access control: API keys, per-key rate limits and USD budgets.

Public surface:

- config: :class:`AuthConfig` (the ``auth`` section);
- keys: :class:`KeyService` (create / revoke / list), :class:`Authenticator` (presented key ->
  :class:`Principal`), :func:`presented_key` (from request headers), :func:`generate_key`,
  :func:`hash_key`, :func:`public_view`, :data:`ANONYMOUS`;
- rate limits: :class:`RateLimiter` (protocol), :class:`MemoryRateLimiter`,
  :class:`RedisRateLimiter`, :func:`build_rate_limiter`;
- budgets: :class:`BudgetGuard`;
- consent: :class:`ConsentService` (a key's team and ``training_use``, a team's), the order a
  call's setting is taken in (:mod:`gateway.auth.consent`).

Refusals are the gateway's own errors (:mod:`gateway.errors`): 401 ``invalid_api_key``,
403 ``key_revoked`` / ``budget_exceeded``, 429 ``rate_limit_exceeded`` with Retry-After.
Plaintext keys are never stored or logged; logs name a key by its id.
"""

from gateway.auth.budget import BudgetGuard
from gateway.auth.config import AuthConfig
from gateway.auth.consent import ConsentService
from gateway.auth.keys import (
    ANONYMOUS,
    Authenticator,
    KeyService,
    Principal,
    generate_key,
    hash_key,
    presented_key,
    public_view,
)
from gateway.auth.ratelimit import (
    MemoryRateLimiter,
    RateLimiter,
    RedisRateLimiter,
    build_rate_limiter,
)

__all__ = [
    "ANONYMOUS",
    "AuthConfig",
    "Authenticator",
    "BudgetGuard",
    "ConsentService",
    "KeyService",
    "MemoryRateLimiter",
    "Principal",
    "RateLimiter",
    "RedisRateLimiter",
    "build_rate_limiter",
    "generate_key",
    "hash_key",
    "presented_key",
    "public_view",
]
