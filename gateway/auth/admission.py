"""Who calls and whether they may now: the key (401/403) and its request rate (429) when the
request arrives; once its prompt is counted, the prompt's tokens (429) and the call's expected
cost (403) held against the key's limits until the exchange settles (gateway.doors.finish).
Anonymous when auth is off."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.auth.budget import BudgetGuard
from gateway.auth.keys import ANONYMOUS, Authenticator, Principal, presented_key
from gateway.auth.ratelimit import RateLimiter

if TYPE_CHECKING:
    from gateway.auth.shared_budget import Reservation


@dataclass(slots=True)
class Hold:
    """What one call holds of its key's limits until it settles: prompt tokens in the key's tpm
    bucket, and a reservation of its fleet budget."""

    tokens: int = 0
    budget: Reservation | None = None


@dataclass
class Admission:
    """The parts that admit a request (all None: auth off, everyone anonymous)."""

    authenticator: Authenticator | None = None
    rate_limiter: RateLimiter | None = None
    budget: BudgetGuard | None = None

    async def admit(self, headers: Mapping[str, str], *, limit: bool = True) -> Principal:
        """The caller's principal; raises 401/403 for a bad key or a spent budget, 429 over its
        request rate or while its token window is full. ``limit=False``: who calls only
        (count_tokens, feedback, model lists)."""
        if self.authenticator is None:
            return ANONYMOUS
        principal = await self.authenticator.authenticate(presented_key(headers))
        if limit and self.rate_limiter is not None:
            await self.rate_limiter.admit(principal)
        return principal

    async def hold(
        self,
        principal: Principal,
        held: Hold,
        *,
        tokens: int | None,
        input_usd: float | None,
    ) -> None:
        """Before the call: hold the prompt's counted ``tokens`` in the key's tpm bucket (429
        with Retry-After when they exceed what is left), then the call's expected cost against
        a fleet budget (403), each into ``held`` as it is taken, so that whatever was taken is
        settled even when the next refuses."""
        if self.authenticator is None or principal.key_id is None:
            return
        if tokens and self.rate_limiter is not None:
            held.tokens = await self.rate_limiter.reserve_tokens(principal, tokens)
        if self.budget is not None:
            # Released when the exchange finishes (gateway.doors.finish), whatever its end.
            held.budget = await self.budget.reserve(principal, input_usd)
