"""A fleet of simulated vLLM replicas, to compare replica selectors at scales this machine cannot
run for real (8 to 64 replicas, rising load).

One simulated replica:

- a prefix cache: an LRU of block keys holding ``cache_blocks`` blocks (vLLM's KV capacity);
  a request reuses the longest run of leading blocks found there, then all its prompt blocks
  become the most recently used, first block most recent (vLLM evicts a prefix from its tail);
- one FIFO server: a request waits for the requests routed before it, then costs
  ``overhead_s + uncached_tokens * prefill_s_per_token`` until its first token (TTFT ends there)
  plus ``output_tokens * decode_s_per_token`` (decode, amortised over vLLM's batch) after it.

Requests are routed at arrival, in arrival order, by a real ``router`` selector (the same object
the gateway runs), which sees what the gateway would: ``ReplicaView`` with in-flight counts, a
``/metrics`` reading of every replica each ``scrape_interval_s`` (running, waiting, KV usage,
capacity), and, for precise mode, KV cache events (stores and evictions) delivered when the
replica performs them. Because each replica is FIFO, a request's cache lookup and its effect on the
cache are known when it is routed; the events they produce are queued with the time they happen.
"""

from __future__ import annotations

import heapq
import statistics
import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from loadtests.kv.workload import KvRequest, KvWorkloadSpec, SegmentTokens, generate
from router.block_hash import BlockHasher
from router.cache_aware import CacheAwareSelector, ReplicaLoad, home_key
from router.features import RequestFeatures
from router.kv_events import BlocksRemoved, BlocksStored, KvEvent
from router.replicas import ReplicaView
from router.selector_config import CacheAwareConfig, SelectorConfig
from router.selectors import ObservingSelector, build_selector


def features_for(request: KvRequest, tokens: Sequence[int]) -> RequestFeatures:
    """The router's view of a trace request, token ids included."""
    ids = tuple(tokens)
    kwargs = {
        "endpoint": "completions",
        "requested_model": "local",
        "prompt_tokens": len(ids),
        "episode_id": request.session,
        "api_key_id": request.client,
    }
    return RequestFeatures(**kwargs, prompt_token_ids=ids)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class SimReplicaSpec:
    cache_blocks: int = 2_048
    block_size: int = 32
    prefill_s_per_token: float = 5e-5
    decode_s_per_token: float = 3e-4
    overhead_s: float = 0.005


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """One simulated request: where it went and what its TTFT was made of."""

    replica: int
    prompt_tokens: int
    cached_tokens: int
    queued_s: float  # waiting for the requests routed before it
    ttft_s: float


@dataclass
class SimResult:
    policy: str
    replicas: int
    requests: int
    hit_rate: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    throughput_rps: float
    max_mean_requests: float
    max_mean_busy: float
    decision_us_p50: float
    decision_us_p99: float
    hash_us_p50: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


class SimCache:
    """A replica's prefix cache: an LRU of ``capacity`` block keys, vLLM's order (a prompt's
    blocks become the most recent, first block most recent)."""

    __slots__ = ("cache", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.cache: OrderedDict[int, None] = OrderedDict()

    def admit(self, keys: Sequence[int]) -> tuple[int, list[int], list[int]]:
        """Cache lookup and update for one request: (hit blocks, stored keys, evicted keys)."""
        cache = self.cache
        hit = 0
        for key in keys:
            if key not in cache:
                break
            hit += 1
        stored = [k for k in keys[hit:] if k not in cache]
        for key in reversed(keys):
            cache[key] = None
            cache.move_to_end(key)
        evicted: list[int] = []
        while len(cache) > self.capacity:
            evicted.append(cache.popitem(last=False)[0])
        return hit, stored, evicted


class _Replica(SimCache):
    __slots__ = ("finishes", "free_at", "in_service_blocks", "name")

    def __init__(self, name: str, capacity: int) -> None:
        super().__init__(capacity)
        self.name = name
        self.free_at = 0.0
        self.finishes: deque[tuple[float, float, int]] = deque()  # (start, finish, blocks)
        self.in_service_blocks = 0

    def outstanding(self, now: float) -> int:
        while self.finishes and self.finishes[0][1] <= now:
            self.finishes.popleft()
        return len(self.finishes)

    def reading(self, now: float) -> ReplicaLoad:
        n = self.outstanding(now)
        running = 1 if n and self.finishes[0][0] <= now else 0
        blocks = sum(b for s, _, b in self.finishes if s <= now)
        return ReplicaLoad(
            running=running,
            waiting=n - running,
            kv_usage=min(1.0, blocks / self.capacity),
            observed_at=now,
            num_blocks=self.capacity,
        )


def _ratio(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else 1.0


def block_keys_of(
    trace: Sequence[KvRequest], tokens: SegmentTokens, hasher: BlockHasher
) -> list[array[int]]:
    """Block keys of every request's prompt (computed once, shared by every policy run)."""
    return [array("Q", hasher.block_keys(tokens.prompt_ids(r))) for r in trace]


def simulate(
    policy: str,
    selector: ObservingSelector,
    trace: Sequence[KvRequest],
    tokens: SegmentTokens,
    keys: Sequence[array[int]],
    n_replicas: int,
    spec: SimReplicaSpec,
    clock: list[float],
    *,
    send_events: bool = False,
    scrape_interval_s: float = 1.0,
    outcomes: list[RequestOutcome] | None = None,
) -> SimResult:
    """Route ``trace`` with ``selector`` over ``n_replicas`` simulated replicas.

    ``clock`` is the one-element list the selector's clock reads (``lambda: clock[0]``);
    ``outcomes``, if given, receives every request's :class:`RequestOutcome` in trace order.
    """
    replicas = [_Replica(f"http://sim-{i}:8000", spec.cache_blocks) for i in range(n_replicas)]
    by_name = {r.name: i for i, r in enumerate(replicas)}
    events: list[tuple[float, int, int, KvEvent]] = []
    seq = 0
    next_scrape = 0.0
    ttfts: list[float] = []
    decisions: list[float] = []
    hash_times: list[float] = []
    counts = [0] * n_replicas
    busy = [0.0] * n_replicas
    hit_tokens = 0
    prompt_tokens = 0
    bs = spec.block_size
    last_finish = 0.0
    for request, req_keys in zip(trace, keys, strict=True):
        now = request.arrival_s
        clock[0] = now
        while events and events[0][0] <= now:
            _, _, idx, event = heapq.heappop(events)
            selector.apply_kv_events(replicas[idx].name, (event,))
        if now >= next_scrape:
            for r in replicas:
                selector.update_load(r.name, r.reading(now))
            next_scrape = now + scrape_interval_s
        views = [ReplicaView(r.name, True, r.outstanding(now)) for r in replicas]
        features = features_for(request, tokens.prompt_ids(request))
        if isinstance(selector, CacheAwareSelector):
            # Timed apart: hashing (memoised) and the choice itself.
            t0 = time.perf_counter()
            tokens_of = features.prompt_token_ids or ()  # type: ignore[attr-defined]
            hashed = selector.hasher.block_keys(tokens_of, features.episode_id)
            t1 = time.perf_counter()
            home = home_key(hashed, features.episode_id)
            chosen = selector.select_for_keys(views, hashed, now, home)
            decisions.append(time.perf_counter() - t1)
            hash_times.append(t1 - t0)
        else:
            t0 = time.perf_counter()
            chosen = selector.select_replica("local", views, features)
            decisions.append(time.perf_counter() - t0)
        idx = by_name[chosen]
        replica = replicas[idx]
        start = max(now, replica.free_at)
        hit, stored, evicted = replica.admit(req_keys)
        n_tokens = features.prompt_tokens
        cached = min(hit * bs, max(0, n_tokens - 1))
        first_token = start + spec.overhead_s + (n_tokens - cached) * spec.prefill_s_per_token
        finish = first_token + request.max_tokens * spec.decode_s_per_token
        replica.free_at = finish
        replica.finishes.append((start, finish, len(req_keys)))
        if send_events:
            if evicted:
                heapq.heappush(events, (start, seq, idx, BlocksRemoved(tuple(evicted), "GPU")))
                seq += 1
            if stored:
                heapq.heappush(events, (start, seq, idx, BlocksStored(tuple(stored), None, "GPU")))
                seq += 1
        ttfts.append(first_token - now)
        if outcomes is not None:
            outcomes.append(RequestOutcome(idx, n_tokens, cached, start - now, first_token - now))
        counts[idx] += 1
        busy[idx] += finish - start
        hit_tokens += cached
        prompt_tokens += n_tokens
        last_finish = max(last_finish, finish)
    span = last_finish - trace[0].arrival_s if trace else 0.0
    utilization = sum(busy) / (n_replicas * span) if span > 0 else 0.0
    qs = statistics.quantiles(ttfts, n=100, method="inclusive")
    dq = statistics.quantiles(decisions, n=100, method="inclusive")
    return SimResult(
        policy=policy,
        replicas=n_replicas,
        requests=len(trace),
        hit_rate=hit_tokens / prompt_tokens if prompt_tokens else 0.0,
        ttft_p50_s=statistics.median(ttfts),
        ttft_p90_s=qs[89],
        ttft_p99_s=qs[98],
        throughput_rps=len(trace) / span if span > 0 else 0.0,
        max_mean_requests=_ratio(counts),
        max_mean_busy=_ratio(busy),
        decision_us_p50=statistics.median(decisions) * 1e6,
        decision_us_p99=dq[98] * 1e6,
        hash_us_p50=statistics.median(hash_times) * 1e6 if hash_times else 0.0,
        extra={"utilization": utilization},
    )


def run_policies(
    configs: Mapping[str, SelectorConfig],
    trace: Sequence[KvRequest],
    tokens: SegmentTokens,
    keys: Sequence[array[int]],
    n_replicas: int,
    spec: SimReplicaSpec,
) -> dict[str, SimResult]:
    """:func:`simulate` every selector of ``configs`` (by report name) on the same trace, each
    from a fresh state; precise-mode selectors get the replicas' KV events."""
    out: dict[str, SimResult] = {}
    for name, config in configs.items():
        clock = [0.0]
        selector = build_selector(config, clock=lambda c=clock: c[0])  # type: ignore[misc]
        precise = isinstance(config, CacheAwareConfig) and config.mode == "precise"
        result = simulate(
            name, selector, trace, tokens, keys, n_replicas, spec, clock, send_events=precise
        )
        span = trace[-1].arrival_s - trace[0].arrival_s if trace else 0.0
        result.extra["offered_rps_per_replica"] = len(trace) / (n_replicas * max(1e-9, span))
        if isinstance(selector, CacheAwareSelector):
            entries = selector.index_entries().values()
            result.extra["index_blocks_max"] = float(max(entries, default=0))
        out[name] = result
    return out


def pooled_lru_hit_rate(
    trace: Sequence[KvRequest], keys: Sequence[Sequence[int]], blocks: int, block_size: int
) -> float:
    """Hit rate of one LRU cache of ``blocks`` blocks serving the whole trace: how much of the
    trace's reuse a fleet's combined capacity holds under vLLM's eviction, whatever the
    routing (a reference, not a bound: separate LRUs can do a little better or worse)."""
    cache = SimCache(blocks)
    hit = total = 0
    for request, request_keys in zip(trace, keys, strict=True):
        matched, _, _ = cache.admit(request_keys)
        hit += min(matched * block_size, request.prompt_tokens - 1)
        total += request.prompt_tokens
    return hit / total if total else 0.0


@dataclass
class SeedRuns:
    """Every policy on several draws (seeds) of one trace shape, and a reference per draw."""

    seeds: tuple[int, ...]
    runs: dict[str, list[SimResult]]  # policy -> one result per seed
    pooled_lru: list[float]  # per seed: :func:`pooled_lru_hit_rate` of the fleet's capacity

    def mean_hit(self, policy: str) -> float:
        return statistics.mean(r.hit_rate for r in self.runs[policy])

    def summary(self, ours: str) -> dict[str, object]:
        """Hit rates per policy per seed and their means; ``ours`` against round-robin (ratio
        of the means, and per seed) and session affinity (points); worst max/mean requests."""
        mean = self.mean_hit(ours)
        return {
            "seeds": list(self.seeds),
            "hit_rate": {
                k: {
                    "per_seed": [round(r.hit_rate, 4) for r in v],
                    "mean": round(self.mean_hit(k), 4),
                }
                for k, v in self.runs.items()
            },
            "pooled_lru_hit_rate": {
                "per_seed": [round(x, 4) for x in self.pooled_lru],
                "mean": round(statistics.mean(self.pooled_lru), 4),
            },
            "ours_vs_round_robin": round(mean / self.mean_hit("round_robin"), 3),
            "ours_vs_round_robin_per_seed": [
                round(o.hit_rate / r.hit_rate, 2)
                for o, r in zip(self.runs[ours], self.runs["round_robin"], strict=True)
            ],
            "ours_minus_session_affinity_points": round(
                100 * (mean - self.mean_hit("session_affinity")), 2
            ),
            "max_mean_requests_worst": {
                k: round(max(r.max_mean_requests for r in v), 3) for k, v in self.runs.items()
            },
        }


def run_over_seeds(
    configs: Mapping[str, SelectorConfig],
    draws: Mapping[int, KvWorkloadSpec],
    n_replicas: int,
    spec: SimReplicaSpec,
) -> SeedRuns:
    """:func:`run_policies` on each draw (seed -> workload), with the pooled-LRU reference."""
    out = SeedRuns(tuple(draws), {}, [])
    for seed, workload in draws.items():
        trace, tokens = generate(workload), SegmentTokens(workload)
        keys = block_keys_of(trace, tokens, BlockHasher(spec.block_size))
        capacity = n_replicas * spec.cache_blocks
        out.pooled_lru.append(pooled_lru_hit_rate(trace, keys, capacity, spec.block_size))
        for name, result in run_policies(configs, trace, tokens, keys, n_replicas, spec).items():
            out.runs.setdefault(name, []).append(result)
        row = "  ".join(f"{k} {v[-1].hit_rate:.1%}" for k, v in out.runs.items())
        pooled = out.pooled_lru[-1]
        print(f"  seed {seed:2d} {n_replicas} replicas hit: {row}  (pooled LRU {pooled:.1%})")
    return out
