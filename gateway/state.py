"""Everything a running gateway holds, built once at startup and passed explicitly.

The routing policy and back-end set are immutable values swapped whole on reload
(:meth:`GatewayState.apply_config`): a request in flight keeps the policy and back-ends it
started with, so a reload never drops it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from gateway.auth.budget import BudgetGuard
from gateway.auth.keys import ANONYMOUS, Authenticator, Principal, presented_key
from gateway.auth.login_throttle import LoginThrottle
from gateway.auth.ratelimit import RateLimiter
from gateway.backends.base import Backend
from gateway.backends.frontier import LitellmBackend
from gateway.backends.litellm_loader import LitellmLoader
from gateway.backends.passthrough import PassThroughBackend
from gateway.backends.pricing import PriceBook
from gateway.backends.provider_routes import openai_like_registry, resolve_route
from gateway.backends.replica_pool import ReplicaPool
from gateway.backends.vllm import VllmBackend
from gateway.backends.worker_loop import WorkerLoop
from gateway.config import BackendConfig, SwitchyardConfig, load_config
from gateway.episode_routing import EpisodeRouting
from gateway.fleet.base import Fleet, LocalFleet
from gateway.local_targets import LocalTarget, load_tokenizers
from gateway.metrics import GatewayMetrics
from gateway.prompt_tokens import PromptTokenizer
from gateway.resilience import CircuitBreaker, RetryBudget
from router.config import LearnedConfig, RoutingConfig
from router.decision import RouteDecision
from router.features import RequestFeatures, unit_hash
from router.learned import LearnedPolicy, LearnedState
from router.policy import RoutingPolicy, RulePolicy
from traffic.store.records import InferenceRecord

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Tracer, TracerProvider

    from gateway.fleet.apply import FleetApplier

log = logging.getLogger(__name__)


class RecordSink(Protocol):
    def submit(self, record: InferenceRecord) -> None: ...


class InFlight(Protocol):
    """A request being served, which shutdown can end early (``pipeline.Exchange``)."""

    def abort(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Routing:
    """The swappable unit: a policy and the back-ends it routes to."""

    policy: RoutingPolicy
    backends: dict[str, Backend]
    config: SwitchyardConfig


@dataclass(frozen=True, slots=True)
class Canary:
    """A candidate policy deciding ``share`` of the requests (by a stable hash of their id)."""

    policy: RoutingPolicy
    share: float
    routing: RoutingConfig


def load_learned_state(config: SwitchyardConfig) -> LearnedState | None:
    """The fitted state named by ``routing.learned.state_file`` (blocking: call off the loop)."""
    return read_learned_state(config.routing.learned)


def read_learned_state(learned: LearnedConfig | None) -> LearnedState | None:
    """The fitted state ``learned.state_file`` names; unfitted when the file does not exist yet
    (blocking: call off the loop)."""
    if learned is None:
        return None
    if learned.state_file and Path(learned.state_file).exists():
        return LearnedState.from_json(json.loads(Path(learned.state_file).read_text()))
    return LearnedState("unfitted")


def build_policy(
    config: SwitchyardConfig, routing: RoutingConfig, learned_state: LearnedState | None
) -> RoutingPolicy:
    rules = RulePolicy(routing, config.backends)
    if routing.learned is None:
        return rules
    return LearnedPolicy(rules, routing.learned, learned_state or LearnedState("unfitted"))


@dataclass
class GatewayState:
    config_path: Path | None
    routing: Routing
    breakers: dict[str, CircuitBreaker]
    retry_budget: RetryBudget
    metrics: GatewayMetrics
    session: aiohttp.ClientSession
    litellm: LitellmLoader  # imported in the background after start-up
    worker: WorkerLoop  # where litellm's calls run (see gateway.backends.worker_loop)
    recorder: RecordSink | None
    tracer: Tracer | None = None
    tracer_provider: TracerProvider | None = None
    live: dict[str, InFlight] = field(default_factory=dict)  # requests in flight, by id
    draining: bool = False
    reloads: int = 0
    canary: Canary | None = None
    learned_state: LearnedState | None = None
    shadows_in_flight: int = 0
    background: set[asyncio.Task[None]] = field(default_factory=set)
    authenticator: Authenticator | None = None
    rate_limiter: RateLimiter | None = None
    login_throttle: LoginThrottle | None = None  # wrong admin tokens per address (set at start-up)
    budget: BudgetGuard | None = None
    openai_like: dict[str, str] = field(default_factory=dict)  # litellm's provider registry
    prices: PriceBook = field(default_factory=PriceBook.empty)  # litellm's map, read at start-up
    # The gateway processes this one shares routing, canary and replica controls with
    # (gateway.fleet), and what applies the fleet's changes here (set at start-up).
    fleet: Fleet = field(default_factory=LocalFleet)
    applier: FleetApplier | None = None
    # Agent episodes' fallback after a failed local step (set at start-up with the fleet).
    episodes: EpisodeRouting = field(default_factory=EpisodeRouting)

    @property
    def in_flight(self) -> int:
        return len(self.live)

    def begin_drain(self) -> None:
        """Shutdown began: ``/ready`` answers 503 now, and what is still in flight after
        ``limits.drain_timeout_s`` is ended with an error in its door's shape (and recorded)."""
        if self.draining:
            return
        self.draining = True
        timeout = self.config.gateway.limits.drain_timeout_s
        asyncio.get_running_loop().call_later(timeout, self.abort_in_flight)

    def abort_in_flight(self) -> None:
        for exchange in list(self.live.values()):
            exchange.abort()

    async def admit(self, headers: Mapping[str, str], *, limit: bool = True) -> Principal:
        """Who calls (401/403) and whether they may now (429); anonymous when auth is off."""
        if self.authenticator is None:
            return ANONYMOUS
        principal = await self.authenticator.authenticate(presented_key(headers))
        if limit and self.rate_limiter is not None:
            await self.rate_limiter.admit(principal)
        if limit and self.budget is not None:
            # Released when the exchange finishes (gateway.accounting), whatever its end.
            await self.budget.reserve(principal)
        return principal

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """A background task the state keeps a reference to until it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    _locals: dict[str, LocalTarget] = field(default_factory=dict)
    tokenizers: dict[str, PromptTokenizer] = field(default_factory=dict)
    _reload_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def config(self) -> SwitchyardConfig:
        return self.routing.config

    def build_routing(self, config: SwitchyardConfig) -> Routing:
        """Back-ends and policy for ``config``; local targets are reused while unchanged."""
        backends: dict[str, Backend] = {}
        for name, bc in config.backends.items():
            if bc.kind == "vllm":
                local = self._locals.get(name)
                if local is None or not local.same_config(bc):
                    if local is not None:
                        self.spawn(local.aclose())
                    local = LocalTarget.start(bc, self.session, self.tokenizers)
                    self._locals[name] = local
                backends[name] = VllmBackend(
                    name, bc, self.session, local.selector, local.pool, local.tokenizer
                )
                self.fleet.share_routing(name, local.selector)
            else:
                backends[name] = self._frontier_backend(name, bc)
            if name not in self.breakers:
                b = config.gateway.breaker
                self.breakers[name] = CircuitBreaker(b.failure_threshold, b.cooldown_s)
        policy = build_policy(config, config.routing, self.learned_state)
        return Routing(policy, backends, config)

    def _frontier_backend(self, name: str, bc: BackendConfig) -> Backend:
        """A direct route where the provider speaks a door's format, litellm for the rest."""
        self.litellm.start()  # every frontier target has calls only litellm can translate
        slow = LitellmBackend(name, bc, self.litellm, self.worker)
        api_key = os.environ.get(bc.api_key_env) if bc.api_key_env else None
        route = resolve_route(bc, api_key, self.openai_like)
        if route is None:
            return slow
        return PassThroughBackend(name, bc, route, self.session, slow)

    def apply_config(self, config: SwitchyardConfig, learned: LearnedState | None) -> None:
        self.learned_state = learned
        self.routing = self.build_routing(config)
        self.reloads += 1
        self.warn_unpriced(config)

    def warn_unpriced(self, config: SwitchyardConfig) -> None:
        """Tell the operator which frontier back-ends' calls will be recorded without a cost."""
        for name in self.prices.unpriced(config.backends):
            log.warning(
                "back-end %r: no price for %s (none configured, none in litellm's price map); "
                "its calls are recorded with an unknown cost: set input_usd_per_mtok and "
                "output_usd_per_mtok",
                name,
                config.backends[name].model,
            )

    async def reload(self) -> Routing:
        """Re-read the config file (and the learned state) and swap routing atomically; with a
        fleet, every gateway of the fleet swaps to them (``reloader``).

        Raises on an invalid file; the running routing is kept then.
        """
        if self.applier is not None:
            await self.applier.reload()
            return self.routing
        async with self._reload_lock:
            if self.config_path is None:
                config = self.config
            else:
                config = await asyncio.to_thread(load_config, self.config_path)
            learned = await asyncio.to_thread(load_learned_state, config)
            self.tokenizers = load_tokenizers(config, self.tokenizers)
            for tokenizer in self.tokenizers.values():  # a target it adds hashes from the start
                await tokenizer.await_load()
            self.apply_config(config, learned)
        return self.routing

    def decide(self, routing: Routing, features: RequestFeatures) -> RouteDecision:
        """The routing decision, by the canary policy for its share of requests."""
        canary = self.canary
        if canary is not None and unit_hash(features.request_id or "", "canary") < canary.share:
            return canary.policy.decide(features)
        return routing.policy.decide(features)

    def pools(self) -> dict[str, ReplicaPool]:
        return {name: local.pool for name, local in self._locals.items()}

    def kv_event_counters(self) -> dict[str, dict[str, dict[str, float]]]:
        """Per local target in precise mode, per replica: the KV event subscriber's counters."""
        return {
            name: {url: st.counters() for url, st in local.subscriber.stats.items()}
            for name, local in self._locals.items()
            if local.subscriber is not None
        }

    async def aclose(self) -> None:
        for local in self._locals.values():
            await local.aclose()
        await self.episodes.aclose()
        await asyncio.to_thread(self.worker.close)


def new_state(
    config: SwitchyardConfig,
    config_path: Path | None,
    session: aiohttp.ClientSession,
    litellm: LitellmLoader,
    recorder: RecordSink | None,
    metrics: GatewayMetrics,
    prices: PriceBook,
) -> GatewayState:
    r = config.gateway.retry
    state = GatewayState(
        config_path=config_path,
        routing=None,  # type: ignore[arg-type]  # set just below, needs the state's pools
        breakers={},
        retry_budget=RetryBudget(r.budget_ratio, r.min_retries_per_s),
        metrics=metrics,
        session=session,
        litellm=litellm,
        worker=WorkerLoop(),
        recorder=recorder,
        prices=prices,
    )
    state.openai_like = openai_like_registry()
    state.learned_state = load_learned_state(config)
    state.tokenizers = load_tokenizers(config, {})
    state.routing = state.build_routing(config)
    state.warn_unpriced(config)
    return state
