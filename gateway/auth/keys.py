"""API keys: generated once, stored as a hash, checked on every call through a short-lived cache.

A key is ``key_prefix`` + 43 url-safe characters from :mod:`secrets` (256 random bits). The store
keeps only ``sha256(key)`` in hex and the first characters (``prefix``) to recognise it in
listings; the plaintext is returned once by :meth:`KeyService.create` and never kept or logged.

Why a plain SHA-256 and not bcrypt/argon2: slow, salted hashes protect *low-entropy* secrets
(passwords) against offline guessing once the hashes leak. A 256-bit random key cannot be guessed
whatever the hash speed (2**256 candidates), so a fast hash loses nothing, and it lets the store
find a key by its hash with an index (bcrypt's per-row salt would force comparing every row).

:class:`Authenticator` turns a presented key into a :class:`Principal`:

    no key             -> anonymous if auth is optional, else 401 invalid_api_key
    wrong prefix/size  -> 401 without a store lookup (anonymous if auth is optional)
    cached, checked less than cache_ttl_s ago -> the cached answer, no store round trip
    cached, read less than max_stale_s ago    -> the cached answer at once; a background read
                                                 (one per key at a time) refreshes the entry
    otherwise (never seen, a cached "unknown" past cache_ttl_s, a read max_stale_s old or more)
                       -> the request waits for that read (one per key, shared by concurrent
                          requests), at most lookup_timeout_s; then 503 auth_store_unavailable
    unknown            -> 401 invalid_api_key (anonymous if auth is optional)
    revoked            -> 403 key_revoked
    budget spent       -> 403 budget_exceeded (:class:`~gateway.auth.budget.BudgetGuard`)

A principal carries its key's consent (``training_use``: the key's own, else its team's, read
with the key; :mod:`gateway.auth.consent`), which the record of each of its calls is stamped with.

So a key that has been validated never waits on the store again while its entry is younger than
``max_stale_s``: a slow, frozen or unreachable store delays nothing but the refresh. A failed
refresh is logged and tried again after another ``cache_ttl_s``.

The trade-off is revocation (and spend recorded by other processes): while the store answers, a
revocation made elsewhere takes effect within ``cache_ttl_s`` plus one store round trip (the call
that finds the entry expired is still admitted; the read it starts brings the revocation in).
While the store does not answer, a revoked key keeps working for up to ``max_stale_s`` after its
last successful read; ``max_stale_s: 0`` trades that for a store read before every answer past
``cache_ttl_s``. A revocation through this process's :class:`KeyService` followed by
:meth:`Authenticator.invalidate` (what the admin API does) takes effect at once.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gateway.auth.budget import BudgetGuard
from gateway.auth.config import DEFAULT_KEY_PREFIX, AuthConfig
from gateway.auth.consent import check_consent, inherited_training_use
from gateway.errors import AuthenticationError, PermissionDeniedError, ServiceUnavailableError
from traffic.store.backend import StoreBackend
from traffic.store.errors import StoreUnavailable
from traffic.store.records import ApiKeyRecord, TrainingUse

log = logging.getLogger(__name__)

KEY_RANDOM_BYTES: Final = 32  # 256 bits -> 43 url-safe characters
SHOWN_PREFIX_CHARS: Final = 6  # random characters kept in ``ApiKeyRecord.prefix``
MAX_KEY_CHARS: Final = 256  # longer presented keys are refused before hashing

MISSING_KEY_MESSAGE: Final = (
    "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' "
    "(or in the 'x-api-key' header)."
)
INVALID_KEY_MESSAGE: Final = "Incorrect API key provided."


def generate_key(prefix: str) -> str:
    """A new plaintext key: ``prefix`` + 43 url-safe characters (256 random bits)."""
    return prefix + secrets.token_urlsafe(KEY_RANDOM_BYTES)


def hash_key(key: str) -> str:
    """What the store keeps of a key: SHA-256 hex (see the module docstring for why)."""
    return hashlib.sha256(key.encode()).hexdigest()


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a client sent: ``Authorization: Bearer``, else ``x-api-key`` (Anthropic clients),
    else ``api-key`` (Azure-style clients). ``headers`` must be case-insensitive (Starlette's
    ``Headers``) or have lower-case names."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    for name in ("x-api-key", "api-key"):
        value = headers.get(name)
        if value and value.strip():
            return value.strip()
    return None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, and the limits that apply (None: unlimited). ``key_id`` None: anonymous.
    ``training_use``: the key's consent, else its team's (None: the config's ``training_use``,
    applied where the record is stamped, so a reload's default applies at once)."""

    key_id: str | None
    name: str
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    budget_usd: float | None = None
    training_use: TrainingUse | None = None

    @property
    def anonymous(self) -> bool:
        return self.key_id is None


ANONYMOUS: Final = Principal(key_id=None, name="anonymous")


def public_view(record: ApiKeyRecord) -> dict[str, Any]:
    """A key as the admin API and CLI show it: everything but the hash."""
    return {
        "id": record.id,
        "name": record.name,
        "prefix": record.prefix,
        "created_at": record.created_at.isoformat(),
        "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None,
        "rpm_limit": record.rpm_limit,
        "tpm_limit": record.tpm_limit,
        "budget_usd": record.budget_usd,
        "spent_usd": record.spent_usd,
        "team_id": record.team_id,
        "training_use": record.training_use,
    }


class KeyService:
    """Create, revoke and list keys in a :class:`StoreBackend` (admin API and CLI)."""

    def __init__(self, store: StoreBackend, *, key_prefix: str = DEFAULT_KEY_PREFIX) -> None:
        self._store = store
        self._prefix = key_prefix

    async def create(
        self,
        name: str,
        rpm_limit: int | None = None,
        tpm_limit: int | None = None,
        budget_usd: float | None = None,
        *,
        team_id: str | None = None,
        training_use: TrainingUse | None = None,
    ) -> tuple[ApiKeyRecord, str]:
        """Store a new key; return its record and the plaintext, which exists nowhere else.
        ``team_id``: the team it belongs to; ``training_use``: its own consent (None: its
        team's, else the config's)."""
        name = name.strip()
        if not name:
            raise ValueError("a key needs a non-empty name")
        check_consent(team_id, training_use)
        for label, limit in (("rpm_limit", rpm_limit), ("tpm_limit", tpm_limit)):
            if limit is not None and limit < 1:
                raise ValueError(f"{label} must be >= 1 (or None for unlimited), got {limit}")
        if budget_usd is not None and (not math.isfinite(budget_usd) or budget_usd < 0):
            raise ValueError(f"budget_usd must be >= 0 (or None for unlimited), got {budget_usd}")
        plaintext = generate_key(self._prefix)
        record = ApiKeyRecord(
            name=name,
            key_hash=hash_key(plaintext),
            prefix=plaintext[: len(self._prefix) + SHOWN_PREFIX_CHARS],
            rpm_limit=rpm_limit,
            tpm_limit=tpm_limit,
            budget_usd=budget_usd,
            team_id=team_id,
            training_use=training_use,
        )
        await self._store.create_api_key(record)
        log.info("api key created: id=%s name=%s", record.id, record.name)
        return record, plaintext

    async def revoke(self, key_id: str) -> bool:
        """Revoke a key; False when it is unknown or revoked already. Processes that cached it
        stop accepting it within ``cache_ttl_s`` and one store read (up to ``max_stale_s`` while
        their store does not answer); call :meth:`Authenticator.invalidate` in this one to make
        it immediate."""
        revoked = await self._store.revoke_api_key(key_id)
        if revoked:
            log.info("api key revoked: id=%s", key_id)
        return revoked

    async def list(self, *, include_revoked: bool = True) -> builtins.list[ApiKeyRecord]:
        return await self._store.list_api_keys(include_revoked=include_revoked)


def _log_read_failure(task: asyncio.Task[_Cached]) -> None:
    """Retrieve a read's exception (nobody may await a background refresh); report the
    unexpected ones (an unavailable store is logged where the cache handles it)."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None and not isinstance(exc, StoreUnavailable):
        log.error("auth: reading a key from the store failed", exc_info=exc)


@dataclass(slots=True)
class _Cached:
    record: ApiKeyRecord | None  # None: the store does not know this hash
    principal: Principal | None  # built once per read, with the config's default limits
    read_at: float  # when the store was last read (how stale the record is; max_stale_s)
    checked_at: float  # when the store was last tried (freshness; also paces retries when down)


class Authenticator:
    """Presented key -> :class:`Principal`, with a cache of hash -> record refreshed in the
    background (stale-while-revalidate, bounded by ``max_stale_s``; see the module docstring).

    Limits a key does not set come from the config's ``default_rpm``/``default_tpm``; build a new
    Authenticator when the config changes (the cache refills within one read per key).
    """

    def __init__(
        self,
        store: StoreBackend,
        config: AuthConfig,
        budget: BudgetGuard | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._config = config
        self._required = config.required
        self._prefix = config.key_prefix
        self._ttl = config.cache_ttl_s
        self._max_stale = config.max_stale_s
        self._lookup_timeout = config.lookup_timeout_s
        self._budget = budget
        self._clock = clock
        # Insertion order = age; separate maps so unknown keys never evict known ones.
        self._known: dict[str, _Cached] = {}
        self._unknown: dict[str, _Cached] = {}
        self._reading: dict[str, asyncio.Task[_Cached]] = {}
        self.store_reads = 0

    async def authenticate(self, presented: str | None) -> Principal:
        """The caller's principal; raises AuthenticationError (401) or PermissionDeniedError
        (403), or ServiceUnavailableError (503) when the key needs a store read that does not
        answer within ``lookup_timeout_s``."""
        if not presented:
            if self._required:
                raise AuthenticationError(MISSING_KEY_MESSAGE, code="invalid_api_key")
            return ANONYMOUS
        if not presented.startswith(self._prefix) or len(presented) > MAX_KEY_CHARS:
            return self._unknown_key()
        key_hash = hash_key(presented)
        entry = self._known.get(key_hash)
        if entry is None or self._clock() - entry.checked_at >= self._ttl:
            entry = await self._revalidate(key_hash, entry)
        principal = entry.principal
        if principal is None:
            return self._unknown_key()
        if entry.record is not None and entry.record.revoked_at is not None:
            raise PermissionDeniedError(
                f"API key '{principal.name}' has been revoked.", code="key_revoked"
            )
        if self._budget is not None:
            self._budget.check(principal)
        return principal

    def invalidate(self, key_id: str) -> None:
        """Forget a key now (after revoking it in this process); the next call reads the store,
        and a read already under way is not cached (it may predate the revocation)."""
        for key_hash in [h for h, c in self._known.items() if c.record and c.record.id == key_id]:
            del self._known[key_hash]
            self._reading.pop(key_hash, None)

    def _unknown_key(self) -> Principal:
        if self._required:
            raise AuthenticationError(INVALID_KEY_MESSAGE, code="invalid_api_key")
        return ANONYMOUS

    async def _revalidate(self, key_hash: str, known: _Cached | None) -> _Cached:
        """The entry to answer with, for a key not fresh in the cache of known keys."""
        now = self._clock()
        if known is None:
            unknown = self._unknown.get(key_hash)
            if unknown is not None and now - unknown.checked_at < self._ttl:
                return unknown
        elif now - known.read_at < self._max_stale:
            self._read(key_hash)  # stale-while-revalidate: answer now, refresh behind
            return known
        try:
            async with asyncio.timeout(self._lookup_timeout):
                # Shielded: a caller that gives up (timeout, client gone) leaves the read running
                # for the others, and for the cache.
                return await asyncio.shield(self._read(key_hash))
        except (StoreUnavailable, TimeoutError) as exc:
            raise ServiceUnavailableError(
                "API keys cannot be checked right now; retry shortly.",
                code="auth_store_unavailable",
            ) from exc

    def _read(self, key_hash: str) -> asyncio.Task[_Cached]:
        """The store read of ``key_hash`` under way, or a new one (single flight per key)."""
        task = self._reading.get(key_hash)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(key_hash))
            task.add_done_callback(_log_read_failure)
            self._reading[key_hash] = task
        return task

    async def _load(self, key_hash: str) -> _Cached:
        this = asyncio.current_task()
        read_at = self._clock()
        self.store_reads += 1
        try:
            record = await self._store.get_api_key_by_hash(key_hash)
            training_use = await inherited_training_use(self._store, record)
        except StoreUnavailable as exc:
            self._read_failed(key_hash, exc)
            raise
        finally:
            current = self._reading.get(key_hash) is this  # False: invalidated meanwhile
            if current:
                del self._reading[key_hash]
        if record is None:
            entry = _Cached(None, None, read_at, read_at)
            if current:
                self._remember(self._unknown, key_hash, entry)
                self._known.pop(key_hash, None)
            return entry
        entry = _Cached(record, self._principal(record, training_use), read_at, read_at)
        if current:
            self._remember(self._known, key_hash, entry)
        if self._budget is not None:
            self._budget.observe(record, read_at)
        return entry

    def _read_failed(self, key_hash: str, exc: StoreUnavailable) -> None:
        """A known key still within ``max_stale_s`` keeps its entry, and the store is tried
        again after another ``cache_ttl_s``; an older one is left expired (requests wait)."""
        cached = self._known.get(key_hash)
        if cached is None or cached.record is None:
            return
        now = self._clock()
        if now - cached.read_at < self._max_stale:
            log.warning(
                "auth: store unavailable (%s); key %s answered from the cache (read %.0fs ago)",
                exc,
                cached.record.id,
                now - cached.read_at,
            )
            cached.checked_at = now

    def _principal(self, record: ApiKeyRecord, training_use: TrainingUse | None) -> Principal:
        cfg = self._config
        return Principal(
            key_id=record.id,
            name=record.name,
            rpm_limit=record.rpm_limit if record.rpm_limit is not None else cfg.default_rpm,
            tpm_limit=record.tpm_limit if record.tpm_limit is not None else cfg.default_tpm,
            budget_usd=record.budget_usd,
            training_use=training_use,
        )

    def _remember(self, cache: dict[str, _Cached], key_hash: str, entry: _Cached) -> None:
        cache.pop(key_hash, None)  # re-inserted at the end: the newest
        cache[key_hash] = entry
        while len(cache) > self._config.cache_max_keys:
            del cache[next(iter(cache))]
