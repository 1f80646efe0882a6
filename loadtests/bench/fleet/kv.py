"""KV-aware replica choice across gateways for ``make bench-fleet`` (parts 3 and 4 of
:mod:`loadtests.bench.fleet.run`): the same trace through one gateway and through three, on real
processes in front of simulated replicas that report prompt-cache hits, and simulated at fleet
scale with the router's own selectors sharing their decisions as the gateways do."""

from __future__ import annotations

import asyncio
import time
import uuid
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx

from loadtests.bench.fleet.gateways import (
    ROOT,
    drop_fleet_keys,
    gateway_config,
    spawn_gateway,
    spawn_sim,
)
from loadtests.bench.servers import Server, ServerFleet, free_port
from loadtests.kv.replica_sim import SimReplicaSpec, block_keys_of, simulate
from loadtests.kv.workload import KvRequest, KvWorkloadSpec, SegmentTokens, generate
from router.block_hash import BlockHasher
from router.cache_aware import CacheAwareSelector
from router.features import RequestFeatures
from router.kv_events import KvEvent
from router.replicas import ReplicaLoad, ReplicaView, RoutedPrompt
from router.selector_config import CacheAwareConfig
from serving.names import LOCAL_MODEL_NAME

# A decision reaches the other gateways within a flush interval (10 ms) plus Redis pub/sub; the
# propagation part of the benchmark measures ~0.1 s for a whole change, which includes HTTP.
SHARE_DELAY_S = 0.02


def kv_spec(sessions: int) -> KvWorkloadSpec:
    """Sessions of 2-4 turns over 12 shared repository contexts (~2k tokens each)."""
    return KvWorkloadSpec(
        sessions=sessions,
        clients=4,
        repos=12,
        system_tokens=300,
        repo_tokens=2000,
        user_tokens=(40, 120),
        answer_tokens=16,
        turns=(2, 4),
        seed=11,
    )


def as_chat(request: KvRequest, tokens: SegmentTokens) -> dict[str, Any]:
    """The request as chat text: a prompt prefix-stable across the session's turns."""
    parts = [
        " ".join(f"{kind}{t}" for t in tokens.tokens(kind, ident, n))
        for kind, ident, n in request.segments
    ]
    return {
        "model": LOCAL_MODEL_NAME,
        "max_tokens": request.max_tokens,
        "messages": [{"role": "system", "content": "\n".join(parts)}],
    }


async def _replay(
    urls: Sequence[str], trace: Sequence[KvRequest], tokens: SegmentTokens
) -> dict[str, float]:
    queue: asyncio.Queue[tuple[int, KvRequest]] = asyncio.Queue()
    for i, request in enumerate(trace):
        queue.put_nowait((i, request))
    cached = prompt = 0
    stayed = moved = 0
    last: dict[str, str] = {}

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal cached, prompt, stayed, moved
        while not queue.empty():
            i, request = queue.get_nowait()
            headers = {"x-switchyard-episode": request.session}
            r = await client.post(
                urls[i % len(urls)] + "/v1/chat/completions",
                json=as_chat(request, tokens),
                headers=headers,
            )
            r.raise_for_status()
            usage = r.json()["usage"]
            prompt += usage["prompt_tokens"]
            cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            replica = r.headers["x-switchyard-replica"]
            if request.session in last:
                stayed += last[request.session] == replica
                moved += last[request.session] != replica
            last[request.session] = replica

    async with httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(4)))
    return {
        "hit_rate": cached / prompt if prompt else 0.0,
        "turns_on_session_replica": stayed / max(1, stayed + moved),
        "requests": float(len(trace)),
    }


def kv_real(sessions: int, work: Path, redis_url: str, tokenizer: Path) -> dict[str, Any]:
    spec = kv_spec(sessions)
    trace, tokens = generate(spec), SegmentTokens(spec)
    out: dict[str, Any] = {}
    for arm, n in (("one_gateway", 1), ("three_gateways", 3)):
        name = f"switchyard:bench-fleet:{uuid.uuid4().hex[:8]}"
        try:
            with ServerFleet(work / f"logs-kv-{arm}") as servers:
                sims = [spawn_sim(servers, f"sim-{arm}-{i}") for i in range(2)]
                for sim in sims:
                    servers.wait_ready(sim, 60)
                replicas = [s.base_url for s in sims]
                gateways = []
                for i in range(n):
                    config = gateway_config(free_port(), replicas, name, redis_url, tokenizer)
                    gateways.append(spawn_gateway(servers, f"gw-{arm}-{i}", config, work, 1)[0])
                for gateway in gateways:
                    servers.wait_ready(gateway, 120, poll_s=0.05)
                    _wait_tokenizer(gateway)
                out[arm] = asyncio.run(_replay([g.base_url for g in gateways], trace, tokens))
        finally:
            drop_fleet_keys(redis_url, name)
        print(f"  kv {arm}: {out[arm]}", flush=True)
    gap = (out["one_gateway"]["hit_rate"] - out["three_gateways"]["hit_rate"]) * 100
    return {**out, "hit_rate_gap_points": gap}


def _wait_tokenizer(gateway: Server, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while "loaded in" not in gateway.log_path.read_text():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{gateway.name}: tokenizer not loaded:\n{gateway.log_tail()}")
        time.sleep(0.05)


def default_tokenizer() -> Path | None:
    """The newest demo model built under .cache (``make setup`` or the tests build it)."""
    found = sorted(
        (ROOT / ".cache" / "models" / "tiny").glob("*/tokenizer.json"),
        key=lambda p: p.stat().st_mtime,
    )
    return found[-1].parent if found else None


class GatewaysSelector:
    """``n`` gateways' cache-aware selectors behind a round-robin balancer; with ``share``, each
    decision reaches the others ``delay_s`` later (simulated time), as ``gateway.fleet.
    routed_feed`` carries it over Redis (a batch every ``routed_flush_s``, then pub/sub)."""

    def __init__(
        self,
        config: CacheAwareConfig,
        n: int,
        clock: Callable[[], float],
        share: bool,
        delay_s: float = SHARE_DELAY_S,
    ):
        self.selectors = [CacheAwareSelector(config, clock) for _ in range(n)]
        self._clock = clock
        self._delay = delay_s
        self._turn = 0
        self._in_transit: deque[tuple[float, int, RoutedPrompt]] = deque()
        if share:
            for i, selector in enumerate(self.selectors):
                selector.on_routed = self._sharer(i)

    def _sharer(self, origin: int) -> Callable[[RoutedPrompt], None]:
        def routed(decision: RoutedPrompt) -> None:
            self._in_transit.append((self._clock() + self._delay, origin, decision))

        return routed

    def _deliver(self) -> None:
        now = self._clock()
        while self._in_transit and self._in_transit[0][0] <= now:
            _, origin, decision = self._in_transit.popleft()
            for j, other in enumerate(self.selectors):
                if j != origin:
                    other.apply_routed(decision)

    def select_replica(
        self, target: str, replicas: Sequence[ReplicaView], features: RequestFeatures
    ) -> str:
        self._deliver()
        self._turn += 1
        return self.selectors[self._turn % len(self.selectors)].select_replica(
            target, replicas, features
        )

    def update_load(self, name: str, load: ReplicaLoad) -> None:
        for selector in self.selectors:
            selector.update_load(name, load)

    def apply_kv_events(self, name: str, events: Iterable[KvEvent]) -> int:
        return sum(s.apply_kv_events(name, events) for s in self.selectors)

    def kv_events_lost(self, name: str, count: int) -> None:
        for selector in self.selectors:
            selector.kv_events_lost(name, count)


def kv_sim(n: int, sessions: int) -> dict[str, Any]:
    spec = KvWorkloadSpec(
        sessions=sessions, clients=5 * n, repos=8 * n, session_rate=0.25 * n, seed=5
    )
    trace, tokens = generate(spec), SegmentTokens(spec)
    replica = SimReplicaSpec(block_size=32)
    keys: list[array[int]] = block_keys_of(trace, tokens, BlockHasher(32, memo_blocks=2**20))
    out: dict[str, Any] = {}
    for arm, gateways, share in (
        ("one_gateway", 1, True),
        ("three_gateways_sharing", 3, True),
        ("three_gateways_not_sharing", 3, False),
    ):
        clock = [0.0]
        config = CacheAwareConfig(block_size=32)
        selector = GatewaysSelector(config, gateways, lambda c=clock: c[0], share)  # type: ignore[misc]
        result = simulate(arm, selector, trace, tokens, keys, n, replica, clock)
        out[arm] = {"hit_rate": result.hit_rate, "ttft_p90_s": result.ttft_p90_s}
        print(f"  sim {arm}: {out[arm]}", flush=True)
    gap = (out["one_gateway"]["hit_rate"] - out["three_gateways_sharing"]["hit_rate"]) * 100
    return {**out, "replicas": n, "requests": len(trace), "hit_rate_gap_points": gap}
