"""Who calls and whether they may now: the key (401/403), its rate limits (429) and its budget
(a reservation released when the exchange finishes); anonymous when auth is off."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.auth.budget import BudgetGuard
from gateway.auth.keys import ANONYMOUS, Authenticator, Principal, presented_key
from gateway.auth.ratelimit import RateLimiter


@dataclass
class Admission:
    """The parts that admit a request (all None: auth off, everyone anonymous)."""

    authenticator: Authenticator | None = None
    rate_limiter: RateLimiter | None = None
    budget: BudgetGuard | None = None

    async def admit(self, headers: Mapping[str, str], *, limit: bool = True) -> Principal:
        """The caller's principal; raises 401/403 for a bad key, 429 over a limit or budget.
        ``limit=False``: who calls only (count_tokens, feedback, model lists)."""
        if self.authenticator is None:
            return ANONYMOUS
        principal = await self.authenticator.authenticate(presented_key(headers))
        if limit and self.rate_limiter is not None:
            await self.rate_limiter.admit(principal)
        if limit and self.budget is not None:
            # Released when the exchange finishes (gateway.doors.finish), whatever its end.
            await self.budget.reserve(principal)
        return principal
