"""Everything a running gateway process holds: plain data, built once at start-up
(:func:`gateway.startup.build_state`) and passed explicitly to whatever serves a request.

Each part has one owner that changes it: the decider's routing and canary change only through
the reload authority (``reloader``); the back-end set and its breakers belong to ``targets``;
requests register in ``requests`` and leave when they are finished (``gateway.doors.finish``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp

from gateway.auth.admission import Admission
from gateway.auth.login_throttle import LoginThrottle
from gateway.backends.pricing import PriceBook
from gateway.backends.prompt_count import PromptCounter
from gateway.background import Background
from gateway.config import SwitchyardConfig
from gateway.in_flight import InFlightRequests
from gateway.metrics import GatewayMetrics
from gateway.recording.sink import RecordSink
from gateway.resilience import CircuitBreaker, RetryBudget
from gateway.routing.decider import Decider
from gateway.routing.release_monitor import ReleaseMonitor
from gateway.routing.reload import Reloader
from gateway.routing.table import Routing
from gateway.routing.targets import Targets
from gateway.secrets.scanner import SecretScanner

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from gateway.tracing.spans import Tracing


@dataclass
class GatewayState:
    """One gateway process's parts (module docstring)."""

    config_path: Path | None
    session: aiohttp.ClientSession  # one for every back-end
    metrics: GatewayMetrics
    prices: PriceBook  # litellm's price map, read at start-up
    prompt_counter: PromptCounter  # prompt tokens before a call (gateway.doors.prompt_gate)
    recorder: RecordSink | None  # None: the store is off
    decider: Decider  # the one routing decision
    targets: Targets  # the back-ends it routes to, their pools and breakers
    reloader: Reloader  # the one reload authority, with the fleet
    retry_budget: RetryBudget
    admission: Admission = field(default_factory=Admission)
    login_throttle: LoginThrottle | None = None  # wrong admin tokens per address
    requests: InFlightRequests = field(default_factory=InFlightRequests)
    background: Background = field(default_factory=Background)
    tracing: Tracing | None = None  # None: traces off (gateway.tracing)
    tracer_provider: TracerProvider | None = None
    shadows_in_flight: int = 0
    release_monitor: ReleaseMonitor | None = None  # the running canary's test
    secrets: SecretScanner = field(default_factory=SecretScanner)  # targets' `secrets` policy

    @property
    def config(self) -> SwitchyardConfig:
        """The config of the routing served now."""
        return self.decider.routing.config

    @property
    def routing(self) -> Routing:
        """The routing served now (a request reads ``decider.view()`` once instead)."""
        return self.decider.routing

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        return self.targets.breakers
