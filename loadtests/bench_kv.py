"""``make bench-kv``: KV-cache-aware replica choice against round-robin, least-load and session
affinity, on real vLLM replicas and on a simulated fleet. ``BENCH_QUICK=1`` (or ``--quick``):
smaller traces and fewer load levels (about five minutes, two vLLM boots included).

Real part: two vLLM CPU replicas with prefix caching, our hash algorithm (``sha256_cbor``), KV
events on ZMQ, a deliberately small KV cache (the trace's working set fits in both caches
together, not in each: where replica choice matters) and dev mode (``/reset_prefix_cache``
between policies). Requests go straight to the replicas as the selector chooses, with the
gateway's components around it (``/metrics`` scraper, KV event subscriber, in-flight counts);
prompts are token ids sent to ``/v1/completions`` (streamed, ``ignore_eos``), so vLLM hashes what
the selector hashed. Judged by vLLM's own counters: hit rate = delta ``prefix_cache_hits`` /
delta ``prefix_cache_queries``; TTFT to the first streamed token; max/mean requests per replica.

Scale part: ``loadtests/replica_sim.py`` with 8 to 64 replicas and rising load, every policy on
the same trace; TTFT p90 against load is drawn to ``<out>/kv_ttft_p90.png``. The selector's own
cost: decision time per request at 64 replicas (choice only; hashing timed apart) and index
bytes per replica.

Output: a table per part, then, as the last line, one JSON object with hit rates and TTFT p90 per
policy and the ratios of ours (``cache_aware``) to each baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from gateway.backends.replica_metrics import ReplicaMetricsScraper, parse_metrics
from gateway.kv_event_subscriber import KvEventSubscriber
from loadtests.kv_workload import KvRequest, KvWorkloadSpec, SegmentTokens, generate, scaled
from loadtests.replica_sim import SimReplicaSpec, SimResult, block_keys_of, features_for, simulate
from router.block_hash import BlockHasher
from router.cache_aware import CacheAwareSelector, PrefixIndex
from router.replicas import ReplicaView
from router.selector_config import (
    CacheAwareConfig,
    LeastLoadConfig,
    RoundRobinConfig,
    SelectorConfig,
    SessionAffinityConfig,
)
from router.selectors import ObservingSelector, build_selector
from serving.build import ensure_demo_model
from serving.replica import VllmReplica, find_free_port
from serving.vllm_config import VllmLaunchConfig

OURS = "cache_aware"
HASH_ALGO = "sha256_cbor"
KV_TOPIC = "kv"
REAL_BLOCK_SIZE = 32
REAL_NUM_BLOCKS = 320  # 10k tokens per replica: the trace's working set needs about two
SIM_BLOCK_SIZE = 32
# The hash memo holds the fleet's recently seen distinct blocks (64 replicas: ~10^5).
MEMO_BLOCKS = 2**19
# Any endpoint satisfies the config check; the real part fills in the replicas' own.
_PRECISE = {"kv_event_endpoints": {"-": "-"}}


def policies(block_size: int) -> dict[str, SelectorConfig]:
    """Every policy compared, by report name."""
    return {
        "round_robin": RoundRobinConfig(),
        "least_load": LeastLoadConfig(),
        "session_affinity": SessionAffinityConfig(),
        OURS: CacheAwareConfig(block_size=block_size, memo_blocks=MEMO_BLOCKS),
        "cache_aware_precise": CacheAwareConfig(
            block_size=block_size, memo_blocks=MEMO_BLOCKS, mode="precise", **_PRECISE
        ),
    }


@dataclass(frozen=True)
class Settings:
    quick: bool
    real_sessions: int
    sim_sizes: tuple[int, ...]
    sim_sessions_per_replica: int
    sim_rate_factors: tuple[float, ...]

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if quick:
            return cls(True, 24, (8, 64), 15, (1.0, 4.0, 6.0, 7.0))
        return cls(False, 60, (8, 16, 32, 64), 40, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0))


def real_workload(sessions: int) -> KvWorkloadSpec:
    return KvWorkloadSpec(
        sessions=sessions,
        clients=2,
        repos=10,
        zipf_s=0.9,
        system_tokens=256,
        repo_tokens=1536,
        user_tokens=(32, 128),
        answer_tokens=16,
        turns=(2, 5),
        session_rate=1.5,
        think_s=3.0,
        burst_every_s=8.0,
        burst_len_s=2.0,
        burst_factor=3.0,
        max_prompt_tokens=4000,
        seed=7,
    )


def sim_workload(replicas: int, sessions_per_replica: int) -> KvWorkloadSpec:
    return KvWorkloadSpec(
        sessions=sessions_per_replica * replicas,
        clients=5 * replicas,
        repos=8 * replicas,
        session_rate=0.25 * replicas,
        seed=1,
    )


# -- real part ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RealReplica:
    url: str
    kv_endpoint: str
    process: VllmReplica


@dataclass
class RealResult:
    policy: str
    requests: int
    errors: int
    hit_rate: float
    ttft_p50_s: float
    ttft_p90_s: float
    throughput_rps: float
    max_mean_requests: float
    per_replica: dict[str, int]


def start_replicas(cache_dir: Path, count: int, num_blocks: int) -> list[RealReplica]:
    """Launch ``count`` replicas (returns at once; :func:`wait_replicas` waits)."""
    model_dir = ensure_demo_model(cache_dir)
    started: list[RealReplica] = []
    for _ in range(count):
        port, kv_port = find_free_port(), find_free_port()
        events = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": KV_TOPIC}
        events["endpoint"] = f"tcp://*:{kv_port}"
        config = VllmLaunchConfig(
            model_dir=model_dir,
            cache_dir=cache_dir,
            port=port,
            enforce_eager=True,
            max_num_seqs=16,
            block_size=REAL_BLOCK_SIZE,
            dev_mode=True,
            extra_args=(
                "--prefix-caching-hash-algo",
                HASH_ALGO,
                "--num-gpu-blocks-override",
                str(num_blocks),
                "--kv-events-config",
                json.dumps(events),
            ),
        )
        process = VllmReplica(config)
        process.start()
        started.append(RealReplica(config.base_url, f"tcp://127.0.0.1:{kv_port}", process))
    return started


async def wait_replicas(replicas: Sequence[RealReplica], timeout_s: float = 400.0) -> None:
    await asyncio.gather(*(r.process.wait_ready(timeout_s) for r in replicas))


def stop_replicas(replicas: Sequence[RealReplica]) -> None:
    for replica in replicas:
        replica.process.stop()


async def _counters(session: aiohttp.ClientSession, urls: Sequence[str]) -> tuple[float, float]:
    hits = queries = 0.0
    for url in urls:
        async with session.get(url + "/metrics") as resp:
            metrics = parse_metrics(await resp.text())
        hits += metrics.prefix_hits
        queries += metrics.prefix_queries
    return hits, queries


async def _reset_caches(session: aiohttp.ClientSession, urls: Sequence[str]) -> None:
    for url in urls:
        for _ in range(50):  # refused while requests still run
            async with session.post(url + "/reset_prefix_cache") as resp:
                if resp.status == 200:
                    break
            await asyncio.sleep(0.2)


async def _stream_ttft(
    session: aiohttp.ClientSession, url: str, model: str, ids: list[int], max_tokens: int
) -> float:
    """Send one streamed completion; seconds until its first token."""
    body = {"model": model, "prompt": ids, "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "temperature": 0.0}  # fmt: skip
    t0 = time.perf_counter()
    ttft = -1.0
    async with session.post(url + "/v1/completions", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url} answered {resp.status}: {(await resp.text())[:200]}")
        async for line in resp.content:
            if ttft < 0 and line.startswith(b"data: {"):
                ttft = time.perf_counter() - t0
    return ttft


async def run_real_policy(
    name: str,
    config: SelectorConfig,
    replicas: Sequence[RealReplica],
    trace: Sequence[KvRequest],
    tokens: SegmentTokens,
    model: str = "switchyard-local",
) -> RealResult:
    """Replay ``trace`` at its own arrival times over ``replicas``, routed by ``config``."""
    urls = [r.url for r in replicas]
    if isinstance(config, CacheAwareConfig) and config.mode == "precise":
        endpoints = {r.url: r.kv_endpoint for r in replicas}
        config = config.model_copy(update={"kv_event_endpoints": endpoints})
    selector: ObservingSelector = build_selector(config)
    in_flight = dict.fromkeys(urls, 0)
    counts = dict.fromkeys(urls, 0)
    ttfts: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        await _reset_caches(session, urls)
        scraper = ReplicaMetricsScraper(
            urls, selector, session, interval_s=0.5, block_size=REAL_BLOCK_SIZE,
            hash_algo=HASH_ALGO,
        )  # fmt: skip
        subscriber = KvEventSubscriber(
            {r.url: r.kv_endpoint for r in replicas}, selector, topic=KV_TOPIC
        )
        await scraper.scrape_all()
        scraper.start()
        subscriber.start()
        await asyncio.sleep(0.5)  # ZMQ subscriptions take a moment to reach the publishers
        hits0, queries0 = await _counters(session, urls)

        async def issue(request: KvRequest) -> None:
            nonlocal errors
            ids = tokens.prompt_ids(request)
            views = [ReplicaView(u, True, in_flight[u]) for u in urls]
            url = selector.select_replica("local", views, features_for(request, ids))
            in_flight[url] += 1
            counts[url] += 1
            try:
                ttfts.append(await _stream_ttft(session, url, model, ids, request.max_tokens))
            except (aiohttp.ClientError, RuntimeError, TimeoutError):
                errors += 1
            finally:
                in_flight[url] -= 1

        start = time.perf_counter()
        tasks = []
        for request in trace:
            delay = request.arrival_s - trace[0].arrival_s - (time.perf_counter() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(issue(request)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
        await scraper.stop()
        await subscriber.stop()
        await asyncio.sleep(1.0)  # vLLM publishes its counters once per engine step
        hits1, queries1 = await _counters(session, urls)
    queries = queries1 - queries0
    values = list(counts.values())
    deciles = statistics.quantiles(ttfts, n=10, method="inclusive")
    return RealResult(
        policy=name,
        requests=len(trace),
        errors=errors,
        hit_rate=(hits1 - hits0) / queries if queries > 0 else 0.0,
        ttft_p50_s=statistics.median(ttfts),
        ttft_p90_s=deciles[8],
        throughput_rps=len(ttfts) / elapsed,
        max_mean_requests=max(values) / (sum(values) / len(values)),
        per_replica=counts,
    )


async def run_real(
    replicas: Sequence[RealReplica], sessions: int, names: Sequence[str] | None = None
) -> dict[str, RealResult]:
    spec = real_workload(sessions)
    trace, tokens = generate(spec), SegmentTokens(spec)
    out: dict[str, RealResult] = {}
    for name, config in policies(REAL_BLOCK_SIZE).items():
        if names is None or name in names:
            out[name] = await run_real_policy(name, config, replicas, trace, tokens)
            print(f"  real {name:20s} {_fmt_real(out[name])}", flush=True)
    return out


def _fmt_real(r: RealResult) -> str:
    return (
        f"hit {r.hit_rate:6.1%}  TTFT p50 {r.ttft_p50_s * 1e3:6.0f} ms  p90 "
        f"{r.ttft_p90_s * 1e3:6.0f} ms  {r.throughput_rps:5.2f} req/s  max/mean "
        f"{r.max_mean_requests:4.2f}  errors {r.errors}"
    )


# -- scale part -----------------------------------------------------------------------------


def run_sim(settings: Settings) -> dict[int, dict[float, dict[str, SimResult]]]:
    spec = SimReplicaSpec(block_size=SIM_BLOCK_SIZE)
    out: dict[int, dict[float, dict[str, SimResult]]] = {}
    for n in settings.sim_sizes:
        workload = sim_workload(n, settings.sim_sessions_per_replica)
        trace, tokens = generate(workload), SegmentTokens(workload)
        keys = block_keys_of(trace, tokens, BlockHasher(SIM_BLOCK_SIZE, memo_blocks=2**20))
        out[n] = {}
        for factor in settings.sim_rate_factors:
            level = scaled(trace, factor)
            out[n][factor] = {}
            for name, config in policies(SIM_BLOCK_SIZE).items():
                clock = [0.0]
                selector = build_selector(config, clock=lambda c=clock: c[0])  # type: ignore[misc]
                result = simulate(
                    name, selector, level, tokens, keys, n, spec, clock,
                    send_events=isinstance(config, CacheAwareConfig) and config.mode == "precise",
                )  # fmt: skip
                result.extra["offered_rps_per_replica"] = result.requests / (
                    n * max(1e-9, level[-1].arrival_s - level[0].arrival_s)
                )
                if isinstance(selector, CacheAwareSelector):
                    entries = selector.index_entries().values()
                    result.extra["index_blocks_max"] = float(max(entries, default=0))
                out[n][factor][name] = result
            row = "  ".join(
                f"{k} {v.ttft_p90_s * 1e3:.0f}ms/{v.hit_rate:.0%}"
                for k, v in out[n][factor].items()
            )
            print(f"  sim n={n:2d} load x{factor:<4} p90/hit: {row}", flush=True)
    return out


def plot(sim: dict[int, dict[float, dict[str, SimResult]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(sim)
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.5 * len(sizes), 4), squeeze=False)
    for ax, n in zip(axes[0], sizes, strict=True):
        factors = sorted(sim[n])
        for name in sim[n][factors[0]]:
            xs = [sim[n][f][name].extra["offered_rps_per_replica"] for f in factors]
            ys = [sim[n][f][name].ttft_p90_s * 1e3 for f in factors]
            ax.plot(xs, ys, marker="o", label=name, linewidth=2.5 if name == OURS else 1.2)
        ax.set_yscale("log")
        ax.set_title(f"{n} replicas")
        ax.set_xlabel("offered load (requests/s per replica)")
        ax.set_ylabel("TTFT p90 (ms, log)")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def selector_cost(replicas: int = 64, prompt_blocks: int = 120) -> dict[str, float]:
    """Decision time at ``replicas`` (choice only, and hashing apart) and index memory."""
    rng = random.Random(0)
    selector = CacheAwareSelector(CacheAwareConfig(block_size=SIM_BLOCK_SIZE), lambda: 0.0)
    views = [ReplicaView(f"http://r{i}:8000", True, rng.randrange(8)) for i in range(replicas)]
    prefixes = [[rng.getrandbits(64) for _ in range(prompt_blocks)] for _ in range(1000)]
    for _ in range(5000):
        selector.select_for_keys(views, rng.choice(prefixes), 0.0)
    choice: list[float] = []
    for _ in range(3000):
        keys = rng.choice(prefixes)[: rng.randrange(prompt_blocks // 4, prompt_blocks)]
        keys = keys + [rng.getrandbits(64) for _ in range(4)]
        t0 = time.perf_counter()
        selector.select_for_keys(views, keys, 0.0)
        choice.append(time.perf_counter() - t0)
    cold = BlockHasher(SIM_BLOCK_SIZE)
    cold.block_keys(list(range(300, 8000)))  # every token id's encoding, once per process
    tokens = [rng.randrange(300, 8000) for _ in range(prompt_blocks * SIM_BLOCK_SIZE)]
    t0 = time.perf_counter()
    cold.block_keys(tokens)
    hash_cold = (time.perf_counter() - t0) / prompt_blocks
    t0 = time.perf_counter()
    cold.block_keys(tokens)
    hash_memo = (time.perf_counter() - t0) / prompt_blocks
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    index = PrefixIndex(50_000, 50_000)
    for _ in range(500):
        index.add_blocks(0, [rng.getrandbits(64) for _ in range(100)], 0.0)
    per_block = (tracemalloc.get_traced_memory()[0] - base) / index.total_entries()
    tracemalloc.stop()
    deciles = statistics.quantiles(choice, n=100, method="inclusive")
    bound = CacheAwareConfig().max_index_blocks
    return {
        "replicas": replicas,
        "decision_us_p50": statistics.median(choice) * 1e6,
        "decision_us_p99": deciles[98] * 1e6,
        "hash_us_per_block_new": hash_cold * 1e6,
        "hash_us_per_block_repeated": hash_memo * 1e6,
        "index_bytes_per_block": per_block,
        "index_bytes_per_replica_bound": per_block * bound,
    }


# -- report ---------------------------------------------------------------------------------


def summary(
    real: dict[str, RealResult],
    sim: dict[int, dict[float, dict[str, SimResult]]],
    cost: dict[str, float],
) -> dict[str, object]:
    out: dict[str, object] = {"selector_cost": {k: round(v, 2) for k, v in cost.items()}}
    if real:
        ours = real[OURS]
        out["real"] = {
            k: {"hit_rate": round(v.hit_rate, 4), "ttft_p90_ms": round(v.ttft_p90_s * 1e3, 1),
                "ttft_p50_ms": round(v.ttft_p50_s * 1e3, 1),
                "max_mean_load": round(v.max_mean_requests, 3),
                "throughput_rps": round(v.throughput_rps, 3)}
            for k, v in real.items()
        }  # fmt: skip
        out["real_ratios"] = {
            k: {"hit_rate": round(ours.hit_rate / v.hit_rate, 3) if v.hit_rate else None,
                "ttft_p90": round(v.ttft_p90_s / ours.ttft_p90_s, 3)}
            for k, v in real.items() if k != OURS
        }  # fmt: skip
    if sim:
        n = max(sim)
        levels = sorted(sim[n])
        out["sim"] = {
            str(size): {
                f"x{f}": {k: {"hit_rate": round(v.hit_rate, 4), "ttft_p90_ms": round(
                    v.ttft_p90_s * 1e3, 1)} for k, v in sim[size][f].items()}
                for f in sorted(sim[size])
            }
            for size in sorted(sim)
        }  # fmt: skip
        wins = all(
            sim[size][f][OURS].ttft_p90_s <= r.ttft_p90_s
            for size in sim for f in sim[size] for k, r in sim[size][f].items()
            if k not in (OURS, "cache_aware_precise")
        )  # fmt: skip
        # Near saturation: the first level where round-robin's TTFT p90 has left its floor
        # (5x its p90 at the lightest level): its replicas are saturating there.
        light = sim[n][levels[0]]["round_robin"].ttft_p90_s
        near = min((f for f in levels if sim[n][f]["round_robin"].ttft_p90_s >= 5 * light),
                   default=levels[-1])  # fmt: skip
        at = sim[n][near]
        out["sim_ratios"] = {
            "replicas": n,
            "load_factor": near,
            "ttft_p90_vs": {k: round(v.ttft_p90_s / at[OURS].ttft_p90_s, 2)
                            for k, v in at.items() if k != OURS},
            "ours_best_everywhere": wins,
        }  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", default=bool(os.environ.get("BENCH_QUICK")))
    parser.add_argument("--skip-real", action="store_true")
    parser.add_argument("--skip-sim", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    settings = Settings.make(args.quick)
    cache = Path(os.environ.get("SWITCHYARD_CACHE") or Path.cwd() / ".cache").resolve()
    out_dir = args.out or cache / "bench" / "kv"
    replicas: list[RealReplica] = []
    real: dict[str, RealResult] = {}
    sim: dict[int, dict[float, dict[str, SimResult]]] = {}
    try:
        if not args.skip_real:
            print("starting 2 vLLM CPU replicas (the simulation runs meanwhile)", flush=True)
            replicas = start_replicas(cache, 2, REAL_NUM_BLOCKS)
        if not args.skip_sim:
            sim = run_sim(settings)
            plot(sim, out_dir / "kv_ttft_p90.png")
            print(f"  plot: {out_dir / 'kv_ttft_p90.png'}", flush=True)
        cost = selector_cost()
        print(f"  selector cost: {json.dumps({k: round(v, 2) for k, v in cost.items()})}")
        if replicas:
            asyncio.run(wait_replicas(replicas))
            real = asyncio.run(run_real(replicas, settings.real_sessions))
    finally:
        stop_replicas(replicas)
    report = summary(real, sim, cost)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_kv.json").write_text(json.dumps(report, indent=2))
    detail = {
        "real": {k: asdict(v) for k, v in real.items()},
        "sim": {
            str(n): {str(f): {k: asdict(v) for k, v in row.items()} for f, row in lv.items()}
            for n, lv in sim.items()
        },
    }
    (out_dir / "bench_kv_detail.json").write_text(json.dumps(detail, indent=1))
    print(json.dumps(report, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
