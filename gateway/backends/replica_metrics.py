"""Reads each vLLM replica's Prometheus ``/metrics`` on a timer and hands the load to the selector.

Per replica, every ``interval_s`` (``router.selector_config.LoadSignalConfig``):

- ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (gauges, summed over engines, i.e.
  data-parallel ranks) and ``vllm:kv_cache_usage_perc`` (0..1, the mean over engines);
- ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (counters, in tokens:
  the replica's own hit rate, for reports and benchmarks);
- ``vllm:cache_config_info`` labels: ``num_gpu_blocks`` (KV capacity, which sizes the approximate
  prefix index), ``block_size``, ``prefix_caching_hash_algo``, ``enable_prefix_caching``. When
  these disagree with what the selector hashes with, every prefix would miss: the scraper logs it
  once per replica and keeps it in :attr:`ReplicaMetricsScraper.problems`. Pass ``hash_algo``
  only for precise mode (it compares vLLM's own hashes); approximate mode needs only the block
  size to agree.

The reading goes to ``selector.update_load(url, ReplicaLoad)``. A replica that does not answer
keeps its last reading, which the selector ignores once older than ``stale_after_s``. Parsing is
a single pass over the lines we need (the full exposition is ~100 kB; a generic parser costs ten
times more).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from router.cache_aware import ReplicaLoad
from router.selectors import ObservingSelector

log = logging.getLogger(__name__)

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:prefix_cache_queries_total": "prefix_queries",
    "vllm:prefix_cache_hits_total": "prefix_hits",
}
_INFO = "vllm:cache_config_info"


@dataclass(frozen=True, slots=True)
class ReplicaMetrics:
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    num_blocks: int | None = None
    block_size: int | None = None
    hash_algo: str | None = None
    prefix_caching: bool | None = None

    def load(self, observed_at: float) -> ReplicaLoad:
        return ReplicaLoad(
            running=self.running,
            waiting=self.waiting,
            kv_usage=self.kv_usage,
            observed_at=observed_at,
            num_blocks=self.num_blocks,
            block_size=self.block_size,
        )


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "None") else None  # type: ignore[arg-type]
    except ValueError:
        return None


def parse_metrics(text: str) -> ReplicaMetrics:
    """The figures we use from a vLLM ``/metrics`` exposition (missing ones stay default)."""
    sums: dict[str, float] = {}
    usage_samples = 0
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name, _, rest = line.partition("{")
        field = _GAUGES.get(name)
        if field is None and name != _INFO:
            continue
        labels, _, value = rest.rpartition("}")
        if field is not None:
            try:
                sums[field] = sums.get(field, 0.0) + float(value.split()[0])
            except (ValueError, IndexError):
                continue
            usage_samples += field == "kv_usage"
        elif not info:
            info = dict(_LABEL.findall(labels))
    caching = info.get("enable_prefix_caching")
    return ReplicaMetrics(
        running=int(sums.get("running", 0)),
        waiting=int(sums.get("waiting", 0)),
        # One usage gauge per engine: the mean; the other figures are sums over engines.
        kv_usage=sums.get("kv_usage", 0.0) / max(1, usage_samples),
        prefix_queries=sums.get("prefix_queries", 0.0),
        prefix_hits=sums.get("prefix_hits", 0.0),
        num_blocks=_int(info.get("num_gpu_blocks")),
        block_size=_int(info.get("block_size")),
        hash_algo=info.get("prefix_caching_hash_algo"),
        prefix_caching=None if caching is None else caching == "True",
    )


def cache_config_problem(
    metrics: ReplicaMetrics, block_size: int | None, hash_algo: str | None
) -> str | None:
    """Why this replica's prefix cache cannot match our hashes, or None if it can."""
    if metrics.prefix_caching is False:
        return "prefix caching is off (start vLLM with --enable-prefix-caching)"
    if block_size is not None and metrics.block_size not in (None, block_size):
        return f"vLLM block_size is {metrics.block_size}, the selector hashes {block_size}"
    if hash_algo is not None and metrics.hash_algo not in (None, hash_algo):
        return (
            f"vLLM --prefix-caching-hash-algo is {metrics.hash_algo}, the selector uses {hash_algo}"
        )
    return None


class ReplicaMetricsScraper:
    """Periodic ``/metrics`` reads of a set of replicas, fed to one selector."""

    def __init__(
        self,
        urls: Sequence[str],
        selector: ObservingSelector,
        session: aiohttp.ClientSession,
        *,
        interval_s: float,
        timeout_s: float = 2.0,
        block_size: int | None = None,
        hash_algo: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.selector = selector
        self._session = session
        self.interval_s = interval_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._block_size = block_size
        self._hash_algo = hash_algo
        self._clock = clock
        self.latest: dict[str, ReplicaMetrics] = {}
        self.problems: dict[str, str] = {}
        self.failures: dict[str, int] = dict.fromkeys(self.urls, 0)
        self._task: asyncio.Task[None] | None = None

    async def scrape(self, url: str) -> ReplicaMetrics | None:
        """One read of ``url``; feeds the selector. None if the replica did not answer."""
        try:
            async with self._session.get(url + "/metrics", timeout=self._timeout) as resp:
                if resp.status != 200:
                    self.failures[url] = self.failures.get(url, 0) + 1
                    return None
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            self.failures[url] = self.failures.get(url, 0) + 1
            return None
        metrics = parse_metrics(text)
        self.latest[url] = metrics
        problem = cache_config_problem(metrics, self._block_size, self._hash_algo)
        if problem and url not in self.problems:
            log.warning(
                "replica %s: %s; prefix-aware routing will not find its cache", url, problem
            )
        if problem:
            self.problems[url] = problem
        else:
            self.problems.pop(url, None)
        self.selector.update_load(url, metrics.load(self._clock()))
        return metrics

    async def scrape_all(self) -> dict[str, ReplicaMetrics | None]:
        results = await asyncio.gather(*(self.scrape(u) for u in self.urls))
        return dict(zip(self.urls, results, strict=True))

    async def _loop(self) -> None:
        while True:
            await self.scrape_all()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
