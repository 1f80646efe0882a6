"""Before the upstream call: the prompt counted, the chain fitted to its targets' context
windows, and the key's tokens and budget held.

    counted when it matters: the key has a tpm limit or a fleet-wide budget, or a target of the
    chain has a known window (every frontier target litellm's model map knows); a local-only
    request of a key without limits is not counted
    plan (pure CPU; on a worker thread for a body over ``limits.offload_body_bytes``, as
    parsing is): fit_windows (gateway.routing.context_window: 400 ``context_length_exceeded``
    before any call for an explicit target, another target for ``auto``), then the count for
    the target tried first
    hold (gateway.auth.admission): that count in the key's tpm bucket (429 and Retry-After when
    the prompt alone exceeds what is left), and its input cost (count x the target's input
    price, gateway.backends.pricing) against a fleet-wide budget (403)

After the call, gateway.doors.finish settles: the bucket gets what the call used beyond what it
held (or back what it held and did not use), the budget's reservation is replaced by the real
cost, and the served target's estimate learns from the prompt tokens it reported.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from gateway.auth.admission import Hold
from gateway.backends.base import Usage
from gateway.backends.pricing import PriceBook
from gateway.backends.prompt_count import PromptCount, PromptCounter, PromptSizes
from gateway.doors.exchange import Exchange
from gateway.routing.context_window import fit_windows
from gateway.routing.table import Routing
from gateway.state import GatewayState
from router.decision import RouteDecision


@dataclass(frozen=True, slots=True)
class Planned:
    """The decision fitted to the windows, and the counts made for it, by target."""

    decision: RouteDecision
    counts: dict[str, PromptCount]


def plan_prompt(
    counter: PromptCounter,
    prices: PriceBook,
    routing: Routing,
    decision: RouteDecision,
    body: dict[str, Any],
    count_first: bool,
) -> Planned:
    """Fit ``decision`` to the windows; ``count_first``: count for its first target too."""
    backends = routing.config.backends
    sizes = PromptSizes(counter, backends, body)
    fitted = fit_windows(decision, routing, lambda t: prices.max_input_tokens(backends[t]), sizes)
    if count_first:
        sizes.of(fitted.target)
    return Planned(fitted, sizes.by_target)


async def gate_prompt(
    state: GatewayState, routing: Routing, ex: Exchange, body: dict[str, Any], *, offload: bool
) -> RouteDecision:
    """The decision to serve ``ex`` by, once its prompt fits and its key's limits hold it
    (module docstring); ``offload``: plan on a worker thread."""
    decision = ex.decision
    assert decision is not None
    principal, admission = ex.principal, state.admission
    keyed = principal.key_id is not None and admission.authenticator is not None
    budget = admission.budget
    by_tokens = keyed and principal.tpm_limit is not None and admission.rate_limiter is not None
    by_cost = (
        keyed
        and principal.budget_usd is not None
        and budget is not None
        and budget.shared is not None
    )
    config = routing.config
    backends = config.backends
    windows = any(state.prices.max_input_tokens(backends[t]) for t in decision.targets)
    tokens: int | None = None
    input_usd: float | None = None
    if config.gateway.token_count.enabled and (by_tokens or by_cost or windows):
        args = (state.prompt_counter, state.prices, routing, decision, body, by_tokens or by_cost)
        planned = await asyncio.to_thread(plan_prompt, *args) if offload else plan_prompt(*args)
        decision = planned.decision
        ex.prompt_counts = planned.counts
        first = planned.counts.get(decision.target)
        if first is not None:
            tokens = first.tokens
            if by_cost:
                input_usd = state.prices.cost_usd(backends[decision.target], Usage(tokens, 0))
    if keyed:
        ex.hold = Hold()
        await admission.hold(principal, ex.hold, tokens=tokens, input_usd=input_usd)
    return decision
