"""Joining a gateway to its fleet at start-up, and what the fleet shows in ``/metrics``.

:func:`start_fleet` is called once by the app's lifespan, after the state, the budget guard and the
rate limiter are built: it picks the fleet the config names, shares the cache-aware targets'
decisions, attaches the applier, joins (the fleet's state, or this process's as the first), and,
with Redis, makes budgets fleet-wide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gateway.auth.redis_scripts import redis_client
from gateway.auth.shared_budget import SharedBudget
from gateway.episode_routing import build_episode_routing
from gateway.fleet.apply import FleetApplier
from gateway.fleet.base import Fleet, LocalFleet
from gateway.state import GatewayState

Gauge = tuple[str, str, dict[str, str], float]

_HELP = {
    "state_stale": "1 while this gateway serves its last known fleet state (Redis unreachable).",
    "revision": "The fleet revision this gateway serves.",
    "members": "Gateway processes in the fleet, as last heard.",
    "redis_failures": "Failed Redis calls of the fleet (a counter).",
    "routed_sent": "Cache-aware decisions sent to the other gateways (a counter).",
    "routed_received": "Other gateways' cache-aware decisions applied here (a counter).",
    "routed_dropped": "Cache-aware decisions not sent (queue full or Redis down; a counter).",
}


def build_fleet(state: GatewayState) -> Fleet:
    config = state.config.fleet
    if not config.shared:
        return LocalFleet()
    # Imported here, not at module level: this module is on the gateway's start-up path, and
    # redis_fleet imports redis (~80-140 ms), which only a shared (Redis) fleet needs.
    from gateway.fleet.redis_fleet import RedisFleet

    return RedisFleet(config)


async def start_fleet(state: GatewayState) -> Fleet:
    """Join this gateway to its fleet (see the module docstring); returns the fleet, which the
    app closes at shutdown."""
    config = state.config
    fleet = build_fleet(state)
    state.fleet = fleet
    state.routing = state.build_routing(config)  # local targets now share their decisions
    state.episodes = build_episode_routing(config, fleet.shared)  # episodes' memory, shared
    state.metrics.add_live_gauges(state.episodes.gauges())
    applier = FleetApplier(state, fleet)
    state.applier = applier
    await fleet.start(applier.apply, applier.seed())
    if fleet.shared and state.budget is not None:
        client = redis_client(
            config.fleet.redis_url,
            timeout_s=config.fleet.timeout_s,
            max_connections=config.auth.redis_max_connections,
        )
        state.budget.share(
            SharedBudget(
                client,
                namespace=config.fleet.name,
                member_id=fleet.member_id,
                reservation_ttl_s=config.auth.budget_reservation_ttl_s,
                retry_s=config.fleet.retry_s,
            )
        )
    state.metrics.add_live_gauges(fleet_gauges(state, applier))
    return fleet


def fleet_gauges(state: GatewayState, applier: FleetApplier) -> Callable[[], Iterable[Gauge]]:
    def read() -> Iterable[Gauge]:
        for key, value in state.fleet.stats().items():
            help_text = _HELP.get(key, f"Fleet: {key}.")
            yield (f"switchyard_fleet_{key}", help_text, {}, value)
        yield (
            "switchyard_fleet_apply_failures",
            "Fleet revisions whose routing or canary did not validate here (a counter).",
            {},
            float(applier.apply_failures),
        )
        shared = state.budget.shared if state.budget is not None else None
        if shared is not None:
            for key, value in shared.stats().items():
                yield (f"switchyard_budget_{key}", f"Fleet budgets: {key}.", {}, value)

    return read
