"""Prometheus metrics, one registry per app (no process-global default registry)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

M = TypeVar("M", bound=MetricWrapperBase)

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
)


class _CallbackCollector(Collector):
    """Gauges read at scrape time from live state (breakers, writer queue)."""

    def __init__(self, read: Callable[[], Iterable[tuple[str, str, dict[str, str], float]]]):
        self._read = read

    def collect(self) -> Iterable[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        for name, doc, labels, value in self._read():
            fam = families.get(name)
            if fam is None:
                fam = families[name] = GaugeMetricFamily(name, doc, labels=list(labels))
            fam.add_metric(list(labels.values()), value)
        return list(families.values())


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "switchyard_requests",
            "Requests by endpoint, target and status.",
            ["endpoint", "target", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "switchyard_request_latency_seconds",
            "Whole-request latency.",
            ["endpoint", "target"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "switchyard_ttft_seconds",
            "Time to first streamed byte from the back-end.",
            ["endpoint", "target"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "switchyard_tokens",
            "Tokens by target and kind (prompt, completion, cached).",
            ["target", "kind"],
            registry=r,
        )
        self.cost = Counter("switchyard_cost_usd", "Cost in USD by target.", ["target"], registry=r)
        self.backend_errors = Counter(
            "switchyard_backend_errors",
            "Back-end failures by target and error type.",
            ["target", "error"],
            registry=r,
        )
        self.failovers = Counter(
            "switchyard_failovers",
            "Requests moved to the next target.",
            ["from_target"],
            registry=r,
        )
        self.shadows = Counter(
            "switchyard_shadows",
            "Shadow evaluations by outcome (recorded, error, skipped).",
            ["outcome"],
            registry=r,
        )
        self.in_flight = Gauge("switchyard_in_flight_requests", "Requests in flight.", registry=r)
        self.admin_auth_failures = Counter(
            "switchyard_admin_auth_failures",
            "Wrong admin tokens by where they were given (login, console_bearer, admin_api).",
            ["surface"],
            registry=r,
        )
        self.admin_auth_throttled = Counter(
            "switchyard_admin_auth_throttled",
            "Admin-token attempts refused (429) after too many wrong ones from their address.",
            ["surface"],
            registry=r,
        )
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}

    def child(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)``, remembered: prometheus_client's ``labels`` checks and
        converts the values and takes a lock on every call; the children kept, a request's
        accounting (five of them, and their increments) costs about a third as much
        (docs/hot_path.md). As bounded as ``labels`` itself, which keeps every child it made."""
        key = (metric, values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found  # type: ignore[return-value]  # labels() returns the metric's own type

    def add_live_gauges(
        self, read: Callable[[], Iterable[tuple[str, str, dict[str, str], float]]]
    ) -> None:
        self.registry.register(_CallbackCollector(read))

    def render(self) -> bytes:
        return generate_latest(self.registry)
