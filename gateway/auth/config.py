"""Configuration of access control (API keys, rate limits, budgets); every default defined once.

Groups:

- keys: ``required``, ``key_prefix``, ``cache_ttl_s``, ``cache_max_keys``, ``max_stale_s``,
  ``lookup_timeout_s`` (how a key is served from the cache: :mod:`gateway.auth.keys`);
- rate limits: ``rate_limit_backend`` (``memory``: counters in this process; ``redis``: counters
  shared by every gateway process using the same Redis), ``redis_*``, ``default_rpm``,
  ``default_tpm``, ``window_s``;
- budgets: ``budget_flush_interval_s``, ``budget_reservation_ttl_s`` (fleet-wide reservations
  with ``fleet.backend: redis``: :mod:`gateway.auth.shared_budget`);
- admin logins: ``admin_login_max_failures``, ``admin_login_window_s`` (wrong admin tokens per
  client address, counted where the rate limits are: :mod:`gateway.auth.login_throttle`);
- consent: ``training_use``, what a call whose key and team set none may be trained on
  (:mod:`gateway.auth.consent`).
"""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from traffic.store.records import TrainingUse

DEFAULT_REQUIRED: Final = True
DEFAULT_KEY_PREFIX: Final = "sy-"
DEFAULT_CACHE_TTL_S: Final = 5.0
DEFAULT_CACHE_MAX_KEYS: Final = 10_000
DEFAULT_MAX_STALE_S: Final = 300.0
DEFAULT_LOOKUP_TIMEOUT_S: Final = 2.0
DEFAULT_REDIS_URL: Final = "redis://127.0.0.1:6379/0"
DEFAULT_REDIS_NAMESPACE: Final = "switchyard:rl"
DEFAULT_REDIS_TIMEOUT_S: Final = 0.5
DEFAULT_REDIS_RETRY_S: Final = 1.0
DEFAULT_REDIS_MAX_CONNECTIONS: Final = 64
DEFAULT_WINDOW_S: Final = 60.0
DEFAULT_BUDGET_FLUSH_INTERVAL_S: Final = 0.5
DEFAULT_BUDGET_RESERVATION_TTL_S: Final = 600.0
DEFAULT_ADMIN_LOGIN_MAX_FAILURES: Final = 5
DEFAULT_ADMIN_LOGIN_WINDOW_S: Final = 60.0
# allow: what every recorded exchange was open to before consent existed; a deployment that
# serves others' engineers sets redact or deny here, or per team.
DEFAULT_TRAINING_USE: Final[TrainingUse] = "allow"

RateLimitBackend = Literal["memory", "redis"]
FailureMode = Literal["open", "closed"]

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]{1,16}$")


class AuthConfig(BaseModel):
    """Who may call the gateway, how often, and for how much."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Keys.
    required: bool = Field(
        default=DEFAULT_REQUIRED,
        description="True: every call needs a valid API key (401 otherwise). False: calls "
        "without a key, or with a key the store does not know, pass as an anonymous principal "
        "with no limits; a known key still gets its own limits, and a revoked one 403.",
    )
    key_prefix: str = Field(
        default=DEFAULT_KEY_PREFIX,
        description="Start of every generated key; a presented key without it is refused "
        "without a store lookup.",
    )
    cache_ttl_s: float = Field(
        default=DEFAULT_CACHE_TTL_S,
        ge=0,
        description="How long a validated key is trusted before the store is read again. Past "
        "it the key is still answered from the cache at once while one background read per key "
        "refreshes it, so a revocation (or a spend recorded by another process) takes effect "
        "within cache_ttl_s plus one store round trip. 0 re-reads on every call (still in the "
        "background; set max_stale_s to 0 too for a read before every answer).",
    )
    cache_max_keys: int = Field(
        default=DEFAULT_CACHE_MAX_KEYS,
        ge=1,
        description="Known keys held in the cache (oldest dropped beyond); unknown keys have a "
        "separate cache of the same size, so a flood of bad keys cannot evict good ones.",
    )
    max_stale_s: float = Field(
        default=DEFAULT_MAX_STALE_S,
        ge=0,
        description="Longest a key is answered from the cache since the store last confirmed "
        "it: while the store is slow, frozen or down, a key read within this long keeps working "
        "(with a warning). An older entry, or a key never seen, waits for the store (at most "
        "lookup_timeout_s, then 503). 0: every answer past cache_ttl_s waits for a store read.",
    )
    lookup_timeout_s: float = Field(
        default=DEFAULT_LOOKUP_TIMEOUT_S,
        gt=0,
        description="Longest a request waits for the store to check a key the cache cannot "
        "answer (never seen, or older than max_stale_s); past it, 503 auth_store_unavailable "
        "(the read goes on in the background, and fills the cache if it succeeds).",
    )

    # Rate limits.
    rate_limit_backend: RateLimitBackend = Field(
        default="memory",
        description="memory: counters in this process (one gateway process); redis: counters "
        "in Redis, shared by every gateway process that uses it.",
    )
    redis_url: str = Field(
        default=DEFAULT_REDIS_URL,
        description="redis://[:password@]host:port/db (or rediss://, unix://); used when "
        "rate_limit_backend is redis. Never logged.",
    )
    redis_namespace: str = Field(
        default=DEFAULT_REDIS_NAMESPACE,
        min_length=1,
        description="Prefix of every Redis key the limiter writes.",
    )
    redis_timeout_s: float = Field(
        default=DEFAULT_REDIS_TIMEOUT_S,
        gt=0,
        description="Connect and command timeout; beyond it Redis counts as down.",
    )
    redis_max_connections: int = Field(
        default=DEFAULT_REDIS_MAX_CONNECTIONS,
        ge=1,
        description="Connections per gateway process; a check waits up to redis_timeout_s for "
        "a free one (then counts as a Redis failure).",
    )
    redis_failure_mode: FailureMode = Field(
        default="open",
        description="What a request gets while Redis is down. open (default): it passes "
        "unlimited, with a logged warning and a failure counter; rate limits protect capacity, "
        "and budgets (the money guard) do not depend on Redis. closed: 429 with Retry-After.",
    )
    redis_retry_s: float = Field(
        default=DEFAULT_REDIS_RETRY_S,
        ge=0,
        description="After a Redis failure, requests skip Redis (applying redis_failure_mode at "
        "once) for this long, so an outage does not add a timeout to every request.",
    )
    default_rpm: int | None = Field(
        default=None,
        ge=1,
        description="Requests per window for keys without their own rpm_limit; None: unlimited.",
    )
    default_tpm: int | None = Field(
        default=None,
        ge=1,
        description="Tokens per window for keys without their own tpm_limit; None: unlimited.",
    )
    window_s: float = Field(
        default=DEFAULT_WINDOW_S,
        gt=0,
        description="The window of rpm and tpm (a minute); a limit of N allows a burst of N and "
        "N per window sustained.",
    )

    # Budgets.
    budget_flush_interval_s: float = Field(
        default=DEFAULT_BUDGET_FLUSH_INTERVAL_S,
        gt=0,
        description="How often spend recorded in memory is added to the store, batched per key.",
    )
    budget_reservation_ttl_s: float = Field(
        default=DEFAULT_BUDGET_RESERVATION_TTL_S,
        gt=0,
        description="With a Redis fleet, a call holds its key's expected cost until it ends; a "
        "hold its gateway never released (the process died) expires after this long.",
    )

    # Admin logins.
    admin_login_max_failures: int = Field(
        default=DEFAULT_ADMIN_LOGIN_MAX_FAILURES,
        ge=1,
        description="Wrong admin tokens one client address may give within admin_login_window_s "
        "(the console's login form, its bearer header, the admin API's bearer header); its next "
        "attempt, right token or wrong, gets 429 with Retry-After until the oldest failure has "
        "drained. Five: a mistyped paste or two, never a search of the token space.",
    )
    admin_login_window_s: float = Field(
        default=DEFAULT_ADMIN_LOGIN_WINDOW_S,
        gt=0,
        description="The window of admin_login_max_failures (a minute); sustained, an address "
        "gets that many guesses per window.",
    )

    # Consent.
    training_use: TrainingUse = Field(
        default=DEFAULT_TRAINING_USE,
        description="What the exchanges of a key with no setting of its own, whose team has "
        "none either (and anonymous calls), may be used for in training, stamped on each record: "
        "allow (as recorded), redact (only after traffic.scrub replaced secrets and PII), deny "
        "(never in a dataset). A key's own setting, else its team's, wins over this one.",
    )

    @field_validator("key_prefix")
    @classmethod
    def _prefix_chars(cls, prefix: str) -> str:
        if not _PREFIX_RE.match(prefix):
            raise ValueError(
                f"key_prefix must be 1-16 characters of A-Z a-z 0-9 _ -, got {prefix!r}"
            )
        return prefix

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str) -> str:
        return check_redis_url(url, "redis_url")


def check_redis_url(url: str, field: str) -> str:
    """``url`` if it names a Redis; else a ValueError that names ``field``, not the URL (it
    may hold a password)."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"{field} must start with redis://, rediss:// or unix://")
    return url
