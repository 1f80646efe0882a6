"""``make bench-fleet``'s part on real replicas: three gateway processes (one Redis fleet) in
front of two vLLM CPU replicas, against one gateway in front of the same replicas.

1. KV-aware choice: ``make bench-kv``'s real trace (IDE chat sessions over per-session
   repository contexts, token-id prompts, ``loadtests.kv.workload``; sizing and seed in
   :mod:`loadtests.bench.kv.run`) is replayed at its own arrival times, first through one gateway,
   then through three behind a round-robin client (request i to gateway i mod 3: each turn of a
   session usually reaches another gateway than the turn before). Both replicas' prefix caches
   are emptied before each replay (vLLM dev mode) and each replay gets fresh gateways (empty
   prefix indexes, a fleet namespace of its own). Judged by vLLM's own counters: hit rate =
   delta ``prefix_cache_hits`` / delta ``prefix_cache_queries`` over both replicas. Target:
   three gateways within 3 points of one.
2. Drain: a drain of one replica posted to one of the three gateways; the time until every
   gateway's ``/admin/fleet`` shows it drained, then 30 requests round-robin through the three:
   the drained replica's ``vllm:request_success_total`` must not move (the replica's own count,
   not the gateways'), and every request must succeed. Then undrain.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from loadtests.bench.fleet.gateways import ADMIN, drop_fleet_keys, spawn_gateway, wait_members
from loadtests.bench.kv.run import (
    REAL_BLOCK_SIZE,
    REAL_NUM_BLOCKS,
    RealReplica,
    real_workload,
    start_replicas,
    wait_replicas,
)
from loadtests.bench.servers import Server, ServerFleet, free_port
from loadtests.kv.gateway_replay import RealResult, gateway_config, replay, reset_prefix_caches
from loadtests.kv.workload import KvRequest, SegmentTokens, generate
from router.selector_config import CacheAwareConfig
from serving.names import LOCAL_MODEL_NAME

SUCCESS = "vllm:request_success_total"
DRAIN_PROBES = 30


def _fleet_config(
    replicas: Sequence[RealReplica], tokenizer: Path, name: str, redis_url: str
) -> dict[str, Any]:
    selector = CacheAwareConfig(block_size=REAL_BLOCK_SIZE)
    config = gateway_config([r.endpoints for r in replicas], selector, tokenizer)
    config["gateway"]["listen"] = {"host": "127.0.0.1", "port": free_port()}
    config["fleet"] = {"backend": "redis", "redis_url": redis_url, "name": name}
    return config


def _spawn(
    servers: ServerFleet,
    n: int,
    replicas: Sequence[RealReplica],
    tokenizer: Path,
    work: Path,
    name: str,
    redis_url: str,
) -> list[Server]:
    gateways = []
    for i in range(n):
        config = _fleet_config(replicas, tokenizer, name, redis_url)
        gateway, _ = spawn_gateway(servers, f"gw-vllm-{n}-{i}", config, work, 1)
        gateways.append(gateway)
    for gateway in gateways:
        servers.wait_ready(gateway, 120, poll_s=0.05)
    wait_members(gateways[0].base_url, n)
    return gateways


def vllm_finished(url: str) -> float:
    """Requests the replica finished, from its own ``/metrics`` (every finish reason)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((SUCCESS + "{", SUCCESS + " "))
    )


def _drain(gateways: Sequence[Server], replica: str) -> dict[str, Any]:
    urls = [g.base_url for g in gateways]
    body = {"target": "local", "replica": replica}
    with httpx.Client(headers=ADMIN, timeout=120) as client:
        started = time.perf_counter()
        answer = client.post(urls[1] + "/admin/replicas/drain", json={**body, "timeout_s": 60})
        answer.raise_for_status()
        seen: dict[str, float] = {}
        while len(seen) < len(urls):
            for url in urls:
                view = client.get(url + "/admin/fleet").json()
                drained = {r["replica"]: r["drained"] for r in view["replicas"]}
                if url not in seen and drained.get(replica) is True:
                    seen[url] = time.perf_counter() - started
            time.sleep(0.002)
        before = vllm_finished(replica)
        failures = 0
        for i in range(DRAIN_PROBES):
            chat = {
                "model": LOCAL_MODEL_NAME,
                "messages": [{"role": "user", "content": f"after the drain {i}"}],
                "max_tokens": 4,
            }
            r = client.post(urls[i % len(urls)] + "/v1/chat/completions", json=chat)
            failures += r.status_code != 200
        time.sleep(1.0)  # vLLM updates its counters once per engine step
        after = vllm_finished(replica)
        client.post(urls[2] + "/admin/replicas/undrain", json=body).raise_for_status()
    return {
        "seen_by_all_s": max(seen.values()),
        "probes": DRAIN_PROBES,
        "probe_failures": failures,
        "drained_replica_new_requests": after - before,
    }


def kv_vllm(
    sessions: int, work: Path, redis_url: str, cache: Path, tokenizer: Path
) -> dict[str, Any]:
    """Both comparisons on two real vLLM replicas (boots included: a few minutes here).
    ``tokenizer``: the demo model's directory, which the replicas serve."""
    spec = real_workload(sessions)
    trace, tokens = generate(spec), SegmentTokens(spec)
    out: dict[str, Any] = {"sessions": sessions, "requests": len(trace)}
    with ServerFleet(work / "logs-vllm") as servers:
        replicas = start_replicas(cache, 2, REAL_NUM_BLOCKS, servers.processes)
        asyncio.run(wait_replicas(replicas))
        urls = [r.url for r in replicas]
        for n in (1, 3):
            name = f"switchyard:bench-fleet-vllm:{uuid.uuid4().hex[:8]}"
            try:
                gateways = _spawn(servers, n, replicas, tokenizer, work, name, redis_url)
                result = asyncio.run(_replay(n, gateways, urls, trace, tokens))
                out[f"gateways_{n}"] = {
                    k: v for k, v in asdict(result).items() if k not in ("outcomes", "kv_events")
                }
                print(f"  vLLM, {n} gateway(s): hit rate {result.hit_rate:.1%}", flush=True)
                if n == 3:
                    out["drain"] = _drain(gateways, urls[1])
                    print(f"  vLLM drain: {out['drain']}", flush=True)
                for gateway in gateways:
                    servers.remove(gateway)
            finally:
                drop_fleet_keys(redis_url, name)
    one, three = out["gateways_1"]["hit_rate"], out["gateways_3"]["hit_rate"]
    out["hit_rate_gap_points"] = round(100 * abs(one - three), 2)
    return out


async def _replay(
    n: int,
    gateways: Sequence[Server],
    replicas: Sequence[str],
    trace: Sequence[KvRequest],
    tokens: SegmentTokens,
) -> RealResult:
    timeout = aiohttp.ClientTimeout(total=900)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
    ) as session:
        await reset_prefix_caches(session, replicas)
        await asyncio.sleep(1.5)  # the gateways' first /metrics scrape of the replicas
        via = [g.base_url for g in gateways]
        return await replay(session, f"{n}-gateways", via, replicas, trace, tokens)
