"""A gateway process's parts, built once at start-up in dependency order (``gateway.app``).

    targets (back-ends: replica pools, tokenizers, breakers)
    -> decider (the one routing decision: policy, canary, episode fallback)
    -> fleet transport (this process alone, or Redis) and the reloader (the one reload authority)
    -> admission (keys, rate limits, budgets; where the store holds keys)
    -> :class:`~gateway.state.GatewayState`, plain data holding them
Joining the fleet (:func:`join_fleet`) comes after, once the app has its state: it needs the
running loop and may wait on Redis. It shares the cache-aware targets' decisions, joins (the
fleet's state, or this process's as the first) and, with Redis, makes budgets fleet-wide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import aiohttp

from gateway.auth.admission import Admission
from gateway.auth.budget import BudgetGuard
from gateway.auth.keys import Authenticator
from gateway.auth.login_throttle import LoginThrottle
from gateway.auth.ratelimit import build_rate_limiter
from gateway.auth.shared_budget import SharedBudget
from gateway.backends.litellm_loader import LitellmLoader
from gateway.backends.pricing import PriceBook
from gateway.backends.prompt_count import PromptCounter
from gateway.backends.provider_routes import openai_like_registry
from gateway.backends.worker_loop import WorkerLoop
from gateway.background import Background
from gateway.config import SwitchyardConfig
from gateway.fleet.base import Fleet, LocalFleet
from gateway.metrics import GatewayMetrics
from gateway.recording.handle import RecorderHandle
from gateway.recording.sink import RecordSink
from gateway.redis_scripts import redis_client
from gateway.resilience import RetryBudget
from gateway.routing.decider import Decider
from gateway.routing.episodes import build_episode_routing
from gateway.routing.release_monitor import ReleaseMonitor
from gateway.routing.reload import Reloader, routing_for
from gateway.routing.table import load_learned_state
from gateway.routing.targets import Targets
from gateway.secrets.scanner import SecretScanner
from gateway.state import GatewayState


def build_state(
    config: SwitchyardConfig,
    config_path: Path | None,
    session: aiohttp.ClientSession,
    recorder: RecordSink | None,
    metrics: GatewayMetrics,
    prices: PriceBook,
    store: RecorderHandle | None = None,
) -> GatewayState:
    """The process's parts for ``config`` (module docstring). ``store``: the traffic store's
    handle when it records here (API keys, budgets and rate limits live in it)."""
    background = Background()
    litellm = LitellmLoader()  # imported in the background once a frontier target needs it
    targets = Targets(
        session, litellm, WorkerLoop(), openai_like_registry(), prices, background.spawn
    )
    learned = load_learned_state(config)
    targets.tokenizers = targets.load_tokenizers(config)
    fleet = build_fleet(config)
    episodes = build_episode_routing(config, fleet.shared)
    metrics.add_live_gauges(episodes.gauges())
    decider = Decider(routing_for(targets, config, learned), learned, episodes)
    targets.warn_unpriced(config)
    reloader = Reloader(decider, targets, fleet, config_path, background.spawn)
    admission = Admission()
    if store is not None:  # keys live in the store
        budget = BudgetGuard(store.backend, flush_interval_s=config.auth.budget_flush_interval_s)
        admission = Admission(
            Authenticator(store.backend, config.auth, budget),
            build_rate_limiter(config.auth),
            budget,
        )
    r = config.gateway.retry
    monitor = ReleaseMonitor(config.release, background.spawn)
    counter = PromptCounter(config.gateway.token_count)
    if config.gateway.token_count.enabled and config.gateway.token_count.preload:
        counter.prepare(config.backends)  # tiktoken's encodings, loaded on a worker thread
    secrets = SecretScanner()  # the scrubber, imported on a worker thread if a target needs it
    secrets.prepare(b.secrets for b in config.backends.values())
    return GatewayState(
        config_path=config_path,
        session=session,
        metrics=metrics,
        prices=prices,
        prompt_counter=counter,
        recorder=recorder,
        decider=decider,
        targets=targets,
        reloader=reloader,
        retry_budget=RetryBudget(r.budget_ratio, r.min_retries_per_s),
        admission=admission,
        login_throttle=LoginThrottle.from_config(config.auth, metrics),
        background=background,
        release_monitor=monitor,
        secrets=secrets,
    )


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


def build_fleet(config: SwitchyardConfig) -> Fleet:
    """The fleet transport ``config.fleet`` names."""
    if not config.fleet.shared:
        return LocalFleet()
    # Imported here, not at module level: this module is on the gateway's start-up path, and
    # redis_fleet imports redis (slow: docs/hot_path.md), which only a shared (Redis) fleet needs.
    from gateway.fleet.redis_fleet import RedisFleet

    return RedisFleet(config.fleet)


async def join_fleet(state: GatewayState) -> Fleet:
    """Join this gateway to its fleet (module docstring); returns the fleet, which the app
    closes at shutdown."""
    config = state.config
    reloader = state.reloader
    fleet = reloader.fleet
    state.targets.share_routing = fleet.share_routing
    reloader.rebuild()  # local targets now share their decisions
    await fleet.start(reloader.apply, reloader.seed())
    budget = state.admission.budget
    if fleet.shared and budget is not None:
        client = redis_client(
            config.fleet.redis_url,
            timeout_s=config.fleet.timeout_s,
            max_connections=config.auth.redis_max_connections,
        )
        budget.share(
            SharedBudget(
                client,
                namespace=config.fleet.name,
                member_id=fleet.member_id,
                reservation_ttl_s=config.auth.budget_reservation_ttl_s,
                retry_s=config.fleet.retry_s,
            )
        )
    state.metrics.add_live_gauges(fleet_gauges(state, reloader))
    return fleet


def fleet_gauges(state: GatewayState, reloader: Reloader) -> Callable[[], Iterable[Gauge]]:
    def read() -> Iterable[Gauge]:
        for key, value in reloader.fleet.stats().items():
            help_text = _HELP.get(key, f"Fleet: {key}.")
            yield (f"switchyard_fleet_{key}", help_text, {}, value)
        yield (
            "switchyard_fleet_apply_failures",
            "Fleet revisions whose routing or canary did not validate here (a counter).",
            {},
            float(reloader.apply_failures),
        )
        budget = state.admission.budget
        shared = budget.shared if budget is not None else None
        if shared is not None:
            for key, value in shared.stats().items():
                yield (f"switchyard_budget_{key}", f"Fleet budgets: {key}.", {}, value)

    return read
