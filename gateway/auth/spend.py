"""What a budget charges and how an amount reads: the two things the budget guard and its
fleet-wide share both speak (:mod:`gateway.auth.budget`, :mod:`gateway.auth.shared_budget`)."""

from __future__ import annotations

import math
from typing import Final, Protocol

USD_SIGNIFICANT_DIGITS: Final = 3  # of amounts under $1 in messages


def format_usd(usd: float) -> str:
    """An amount as people read it: cents from $1 up (``$12.50``), else three significant
    digits without trailing zeros past the cents (``$0.25``, ``$0.0004``, ``$0.000123``)."""
    if usd == 0 or not math.isfinite(usd) or abs(usd) >= 1:
        return f"${usd:,.2f}"
    decimals = max(2, USD_SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(abs(usd))))
    whole, _, fraction = f"{usd:.{decimals}f}".partition(".")
    return f"${whole}.{fraction[:2]}{fraction[2:].rstrip('0')}"


class PrincipalView(Protocol):
    """What the guard needs of a principal (:class:`gateway.auth.keys.Principal` is one)."""

    @property
    def key_id(self) -> str | None: ...
    @property
    def name(self) -> str: ...
    @property
    def budget_usd(self) -> float | None: ...
