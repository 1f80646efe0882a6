"""The real part of ``make bench-kv``: an IDE-like trace replayed *through the gateway* onto vLLM
replicas, one replica selector at a time, judged by vLLM's own prefix-cache counters.

The gateway is a real process (``python -m gateway``, uvicorn on 127.0.0.1) whose config names one
local target over the replicas; :meth:`GatewayUnderTest.use` rewrites its YAML with another
``replica_selector`` and calls ``POST /admin/reload``, which builds a fresh selector (an empty
prefix index) for the target. Before each policy every replica's prefix cache is emptied
(``POST /reset_prefix_cache``, vLLM dev mode), so each policy starts from the same cold caches.

Requests are ``/v1/completions`` with the prompt as token ids, streamed with ``ignore_eos`` and
``stream_options.include_usage``, sent at the trace's own arrival times, with the session id in
``x-switchyard-episode`` (what session affinity keys on). For a token-id prompt the gateway's
tokenizer (``gateway/local/prompt_tokens.py``) passes the ids through unchanged and vLLM uses them
as they are, so the selector hashes exactly the blocks vLLM caches (``router/block_hash.py``); the
precise policy's match on vLLM's own KV event hashes checks that end to end.

Figures per policy: hit rate = delta ``vllm:prefix_cache_hits`` / delta
``vllm:prefix_cache_queries`` over every replica (tokens), and, as a cross-check, the sum of the
per-request ``usage.prompt_tokens_details.cached_tokens`` over the prompt tokens; TTFT at the
client (first streamed token, gateway included); throughput; max/mean requests per replica
(from ``x-switchyard-replica``); the gateway's KV event subscriber counters (precise mode).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from loadtests.bench.servers import Server, ServerFleet
from loadtests.kv.workload import KvRequest, SegmentTokens
from router.selector_config import CacheAwareConfig, RoundRobinConfig, SelectorConfig
from serving.names import ADMIN_TOKEN_ENV, LOCAL_MODEL_NAME

EPISODE_HEADER = "x-switchyard-episode"
REPLICA_HEADER = "x-switchyard-replica"
_COUNTERS = {"vllm:prefix_cache_hits_total": "hits", "vllm:prefix_cache_queries_total": "queries"}
_KV_EVENT_METRIC = "switchyard_kv_events_"


@dataclass(frozen=True)
class ReplicaUnderTest:
    """A running vLLM replica: base URL and its KV event publisher's endpoints."""

    url: str
    kv_endpoint: str
    replay_endpoint: str | None = None


@dataclass
class RealResult:
    policy: str
    requests: int
    errors: int
    hit_rate: float  # vLLM's counters
    usage_hit_rate: float  # the responses' cached_tokens, as a cross-check
    ttft_p50_s: float
    ttft_p90_s: float
    throughput_rps: float
    max_mean_requests: float
    per_replica: dict[str, int]
    kv_events: dict[str, float] = field(default_factory=dict)
    # Per request, in trace order: (replica, prompt tokens, cached tokens, TTFT s); "" / -1
    # where the request failed.
    outcomes: list[tuple[str, int, int, float]] = field(default_factory=list)


def with_endpoints(
    config: SelectorConfig, replicas: Sequence[ReplicaUnderTest], topic: str
) -> SelectorConfig:
    """``config`` with the replicas' KV event endpoints filled in (precise mode only)."""
    if not isinstance(config, CacheAwareConfig) or config.mode != "precise":
        return config
    replay = {r.url: r.replay_endpoint for r in replicas if r.replay_endpoint is not None}
    return config.model_copy(
        update={
            "kv_event_endpoints": {r.url: r.kv_endpoint for r in replicas},
            "kv_event_replay_endpoints": replay,
            "kv_event_topic": topic,
        }
    )


def gateway_config(
    replicas: Sequence[ReplicaUnderTest], selector: SelectorConfig, tokenizer_dir: Path
) -> dict[str, Any]:
    """One local target over ``replicas``; no store, no API keys (nothing but routing runs)."""
    return {
        "backends": {
            "local": {
                "kind": "vllm",
                "model": LOCAL_MODEL_NAME,
                "replicas": [r.url for r in replicas],
                "tokenizer_dir": str(tokenizer_dir),
                "replica_selector": selector.model_dump(mode="json"),
                "timeout_s": 600.0,
                "first_byte_timeout_s": 300.0,
            }
        },
        "routing": {"default": "local", "aliases": {LOCAL_MODEL_NAME: "local"}},
        "gateway": {"limits": {"request_timeout_s": 600.0}},
        "store": {"enabled": False},
        "auth": {"required": False},
    }


class GatewayUnderTest:
    """A gateway process whose replica selector is swapped with ``/admin/reload``."""

    def __init__(
        self,
        fleet: ServerFleet,
        config_dir: Path,
        replicas: Sequence[ReplicaUnderTest],
        tokenizer_dir: Path,
        port: int,
    ) -> None:
        self.replicas = list(replicas)
        self.tokenizer_dir = tokenizer_dir
        self.config_path = config_dir / "gateway-kv.yaml"
        self._token = secrets.token_urlsafe(16)
        config_dir.mkdir(parents=True, exist_ok=True)
        self._write(RoundRobinConfig())
        argv = [sys.executable, "-m", "gateway", "--config", str(self.config_path),
                "--port", str(port)]  # fmt: skip
        self.server: Server = fleet.spawn(
            "gateway-kv", argv, port, "/ready", env={ADMIN_TOKEN_ENV: self._token}
        )
        self._fleet = fleet

    @property
    def url(self) -> str:
        return self.server.base_url

    def wait_ready(self, timeout_s: float = 300.0) -> float:
        return self._fleet.wait_ready(self.server, timeout_s)

    def _write(self, selector: SelectorConfig) -> None:
        config = gateway_config(self.replicas, selector, self.tokenizer_dir)
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    async def use(self, session: aiohttp.ClientSession, selector: SelectorConfig) -> None:
        """Reload the gateway with ``selector`` (a fresh selector and prefix index)."""
        await asyncio.to_thread(self._write, selector)
        headers = {"authorization": f"Bearer {self._token}"}
        async with session.post(self.url + "/admin/reload", headers=headers) as resp:
            if resp.status != 200:
                raise RuntimeError(f"gateway reload refused: {resp.status} {await resp.text()}")

    async def kv_event_counters(self, session: aiohttp.ClientSession) -> dict[str, float]:
        """The gateway's ``switchyard_kv_events_*`` counters, summed over replicas."""
        async with session.get(self.url + "/metrics") as resp:
            text = await resp.text()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(_KV_EVENT_METRIC):
                name = line[len(_KV_EVENT_METRIC) :].partition("{")[0]
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return out


async def prefix_counters(session: aiohttp.ClientSession, urls: Sequence[str]) -> dict[str, float]:
    """vLLM's prefix-cache counters (tokens), summed over ``urls``."""
    out = {"hits": 0.0, "queries": 0.0}
    for url in urls:
        async with session.get(url + "/metrics") as resp:
            text = await resp.text()
        for line in text.splitlines():
            name = line.partition("{")[0].partition(" ")[0]
            if name in _COUNTERS:
                out[_COUNTERS[name]] += float(line.rsplit(" ", 1)[1])
    return out


async def reset_prefix_caches(session: aiohttp.ClientSession, urls: Sequence[str]) -> None:
    for url in urls:
        for _ in range(100):  # vLLM refuses while requests still run
            async with session.post(url + "/reset_prefix_cache") as resp:
                if resp.status == 200:
                    break
            await asyncio.sleep(0.2)
        else:
            raise RuntimeError(f"{url} did not reset its prefix cache")


@dataclass
class _Outcome:
    ttft_s: float = -1.0
    replica: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0


async def _send(
    session: aiohttp.ClientSession, gateway: str, request: KvRequest, ids: list[int]
) -> _Outcome:
    body = {
        "model": LOCAL_MODEL_NAME,
        "prompt": ids,
        "max_tokens": request.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0.0,
    }
    out = _Outcome()
    t0 = time.perf_counter()
    headers = {EPISODE_HEADER: request.session}
    async with session.post(gateway + "/v1/completions", json=body, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"gateway answered {resp.status}: {(await resp.text())[:200]}")
        out.replica = resp.headers.get(REPLICA_HEADER, "")
        async for line in resp.content:
            if not line.startswith(b"data: {"):
                continue
            if out.ttft_s < 0 and b'"choices":[{' in line:
                out.ttft_s = time.perf_counter() - t0
            if b'"usage":{' in line:
                usage: Mapping[str, Any] = json.loads(line[6:])["usage"]
                details = usage.get("prompt_tokens_details") or {}
                out.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                out.cached_tokens = int(details.get("cached_tokens") or 0)
    return out


async def run_policy(
    name: str,
    selector: SelectorConfig,
    gateway: GatewayUnderTest,
    trace: Sequence[KvRequest],
    tokens: SegmentTokens,
    topic: str,
) -> RealResult:
    """Replay ``trace`` at its arrival times through ``gateway`` routed by ``selector``."""
    urls = [r.url for r in gateway.replicas]
    timeout = aiohttp.ClientTimeout(total=900)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await reset_prefix_caches(session, urls)
        await gateway.use(session, with_endpoints(selector, gateway.replicas, topic))
        await asyncio.sleep(1.5)  # the new selector's first /metrics scrape; ZMQ subscriptions
        result = await replay(session, name, [gateway.url], urls, trace, tokens)
        result.kv_events = await gateway.kv_event_counters(session)
    return result


async def replay(
    session: aiohttp.ClientSession,
    name: str,
    gateways: Sequence[str],
    replicas: Sequence[str],
    trace: Sequence[KvRequest],
    tokens: SegmentTokens,
) -> RealResult:
    """Replay ``trace`` at its arrival times, request i through ``gateways[i % n]`` (one gateway,
    or several behind a round-robin client), judged by ``replicas``' vLLM counters."""
    outcomes: list[_Outcome | None] = [None] * len(trace)
    errors = 0
    before = await prefix_counters(session, replicas)

    async def issue(i: int, request: KvRequest) -> None:
        nonlocal errors
        ids = tokens.prompt_ids(request)
        try:
            outcomes[i] = await _send(session, gateways[i % len(gateways)], request, ids)
        except (aiohttp.ClientError, RuntimeError, TimeoutError, ValueError):
            errors += 1

    start = time.perf_counter()
    tasks = []
    for i, request in enumerate(trace):
        delay = request.arrival_s - trace[0].arrival_s - (time.perf_counter() - start)
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(issue(i, request)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    await asyncio.sleep(1.0)  # vLLM updates its counters once per engine step
    after = await prefix_counters(session, replicas)
    done = [o for o in outcomes if o is not None]
    counts = dict.fromkeys(replicas, 0)
    for o in done:
        counts[o.replica] = counts.get(o.replica, 0) + 1
    ttfts = [o.ttft_s for o in done if o.ttft_s >= 0] or [float("nan")]
    deciles = statistics.quantiles(ttfts, n=10, method="inclusive") if len(ttfts) > 1 else ttfts * 9
    queries = after["queries"] - before["queries"]
    prompt_tokens = sum(o.prompt_tokens for o in done)
    loads = [counts[u] for u in replicas]
    mean = sum(loads) / len(loads)
    return RealResult(
        policy=name,
        requests=len(trace),
        errors=errors,
        hit_rate=(after["hits"] - before["hits"]) / queries if queries > 0 else 0.0,
        usage_hit_rate=sum(o.cached_tokens for o in done) / max(1, prompt_tokens),
        ttft_p50_s=statistics.median(ttfts),
        ttft_p90_s=deciles[8],
        throughput_rps=len(done) / elapsed,
        max_mean_requests=max(loads) / mean if mean > 0 else 0.0,
        per_replica=counts,
        outcomes=[
            ("", -1, -1, -1.0)
            if o is None
            else (o.replica, o.prompt_tokens, o.cached_tokens, o.ttft_s)
            for o in outcomes
        ],
    )
