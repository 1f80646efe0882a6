"""The back-ends a routing sends to, built from a config; their replica pools and breakers.

- A ``kind: vllm`` target is a :class:`~gateway.backends.local_target.LocalTarget` (replica pool,
health
  probes, replica selector, tokenizer): kept across reloads while its config is unchanged, so
  its pool's state (health, in flight, drains) and its prefix index survive a reload.
- A ``kind: litellm`` target is a direct route where the provider speaks a door's format
  (:class:`~gateway.backends.passthrough.PassThroughBackend`), litellm for the rest.
- One circuit breaker per target name, kept for the process's life.

Owned by the reload authority (:class:`~gateway.routing.reload.Reloader`), which calls
:meth:`Targets.build` for each routing it applies.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp

from gateway.backends.base import Backend
from gateway.backends.frontier import LitellmBackend
from gateway.backends.litellm_loader import LitellmLoader
from gateway.backends.local_target import LocalTarget, load_tokenizers
from gateway.backends.passthrough import PassThroughBackend
from gateway.backends.pricing import PriceBook
from gateway.backends.provider_routes import resolve_route
from gateway.backends.replica_pool import ReplicaPool
from gateway.backends.vllm import VllmBackend
from gateway.backends.worker_loop import WorkerLoop
from gateway.config import BackendConfig, SwitchyardConfig
from gateway.local.prompt_tokens import PromptTokenizer
from gateway.resilience import CircuitBreaker
from router.selectors import ObservingSelector

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None]], None]
ShareRouting = Callable[[str, ObservingSelector], None]


class Targets:
    """The process's back-ends (module docstring)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        litellm: LitellmLoader,
        worker: WorkerLoop,
        openai_like: dict[str, str],
        prices: PriceBook,
        spawn: Spawn,
    ) -> None:
        self.session = session
        self.litellm = litellm  # imported in the background once a frontier target needs it
        self.worker = worker  # where litellm's calls run (gateway.backends.worker_loop)
        self.openai_like = openai_like  # litellm's registry of OpenAI-compatible providers
        self.prices = prices
        self.breakers: dict[str, CircuitBreaker] = {}
        self.tokenizers: dict[str, PromptTokenizer] = {}
        # Cache-aware targets tell the fleet's other gateways their decisions (set on joining).
        self.share_routing: ShareRouting = lambda target, selector: None
        self._spawn = spawn
        self._locals: dict[str, LocalTarget] = {}

    def load_tokenizers(self, config: SwitchyardConfig) -> dict[str, PromptTokenizer]:
        """The tokenizers ``config``'s cache-aware targets need (those already loaded reused);
        loading starts on threads, :meth:`PromptTokenizer.await_load` waits for it."""
        return load_tokenizers(config, self.tokenizers)

    def build(self, config: SwitchyardConfig) -> dict[str, Backend]:
        """Back-ends for ``config``; local targets are reused while unchanged."""
        backends: dict[str, Backend] = {}
        for name, bc in config.backends.items():
            if bc.kind == "vllm":
                local = self._locals.get(name)
                if local is None or not local.same_config(bc):
                    if local is not None:
                        self._spawn(local.aclose())
                    local = LocalTarget.start(bc, self.session, self.tokenizers)
                    self._locals[name] = local
                backends[name] = VllmBackend(
                    name, bc, self.session, local.selector, local.pool, local.tokenizer
                )
                self.share_routing(name, local.selector)
            else:
                backends[name] = self._frontier_backend(name, bc)
            if name not in self.breakers:
                b = config.gateway.breaker
                self.breakers[name] = CircuitBreaker(b.failure_threshold, b.cooldown_s)
        return backends

    def _frontier_backend(self, name: str, bc: BackendConfig) -> Backend:
        self.litellm.start()  # every frontier target has calls only litellm can translate
        slow = LitellmBackend(name, bc, self.litellm, self.worker)
        api_key = os.environ.get(bc.api_key_env) if bc.api_key_env else None
        route = resolve_route(bc, api_key, self.openai_like)
        if route is None:
            return slow
        return PassThroughBackend(name, bc, route, self.session, slow)

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
