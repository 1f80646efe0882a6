"""Everything a running gateway holds, built once at startup and passed explicitly.

The routing policy and back-end set are immutable values swapped whole on reload
(:meth:`GatewayState.apply_config`): a request in flight keeps the policy and back-ends it
started with, so a reload never drops it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Protocol

import aiohttp
from opentelemetry.sdk.trace import Tracer, TracerProvider

from gateway.backends.base import Backend
from gateway.backends.frontier import LitellmBackend
from gateway.backends.replica_pool import ReplicaPool
from gateway.backends.vllm import VllmBackend
from gateway.config import SwitchyardConfig, load_config
from gateway.metrics import GatewayMetrics
from gateway.resilience import CircuitBreaker, RetryBudget
from gateway.store.records import InferenceRecord
from router.policy import RulePolicy
from router.replicas import ReplicaSelector, RoundRobinSelector


class RecordSink(Protocol):
    def submit(self, record: InferenceRecord) -> None: ...


@dataclass(frozen=True, slots=True)
class Routing:
    """The swappable unit: a policy and the back-ends it routes to."""

    policy: RulePolicy
    backends: dict[str, Backend]
    config: SwitchyardConfig


@dataclass
class GatewayState:
    config_path: Path | None
    routing: Routing
    breakers: dict[str, CircuitBreaker]
    retry_budget: RetryBudget
    selector: ReplicaSelector
    metrics: GatewayMetrics
    session: aiohttp.ClientSession
    litellm: ModuleType
    recorder: RecordSink | None
    tracer: Tracer | None = None
    tracer_provider: TracerProvider | None = None
    in_flight: int = 0
    draining: bool = False
    reloads: int = 0
    _pools: dict[str, ReplicaPool] = field(default_factory=dict)
    _reload_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def config(self) -> SwitchyardConfig:
        return self.routing.config

    def build_routing(self, config: SwitchyardConfig) -> Routing:
        backends: dict[str, Backend] = {}
        for name, bc in config.backends.items():
            if bc.kind == "vllm":
                pool = self._pools.get(name)
                urls = [u.rstrip("/") for u in bc.replicas]
                if pool is None or list(pool.replicas) != urls:
                    pool = ReplicaPool(urls, bc.weights_version)
                    pool.start_probing(self.session)
                    old = self._pools.get(name)
                    if old is not None:
                        asyncio.get_running_loop().create_task(old.stop_probing())
                    self._pools[name] = pool
                backends[name] = VllmBackend(name, bc, self.session, self.selector, pool)
            else:
                backends[name] = LitellmBackend(name, bc, self.litellm)
            if name not in self.breakers:
                b = config.gateway.breaker
                self.breakers[name] = CircuitBreaker(b.failure_threshold, b.cooldown_s)
        policy = RulePolicy(config.routing, config.backends)
        return Routing(policy, backends, config)

    def apply_config(self, config: SwitchyardConfig) -> None:
        self.routing = self.build_routing(config)
        self.reloads += 1

    async def reload(self) -> Routing:
        """Re-read the config file and swap routing atomically; raises on an invalid file."""
        if self.config_path is None:
            return self.routing
        async with self._reload_lock:
            config = await asyncio.to_thread(load_config, self.config_path)
            self.apply_config(config)
        return self.routing

    def pools(self) -> dict[str, ReplicaPool]:
        return dict(self._pools)

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.stop_probing()


def new_state(
    config: SwitchyardConfig,
    config_path: Path | None,
    session: aiohttp.ClientSession,
    litellm: ModuleType,
    recorder: RecordSink | None,
    metrics: GatewayMetrics,
) -> GatewayState:
    r = config.gateway.retry
    state = GatewayState(
        config_path=config_path,
        routing=None,  # type: ignore[arg-type]  # set just below, needs the state's pools
        breakers={},
        retry_budget=RetryBudget(r.budget_ratio, r.min_retries_per_s),
        selector=RoundRobinSelector(),
        metrics=metrics,
        session=session,
        litellm=litellm,
        recorder=recorder,
    )
    state.routing = state.build_routing(config)
    return state
