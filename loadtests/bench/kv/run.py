"""``make bench-kv``: KV-cache-aware replica choice against round-robin, least-load and session
affinity, on real vLLM replicas behind a real gateway and on a simulated fleet. ``BENCH_QUICK=1``
(or ``--quick``): a shorter trace and fewer load levels. Why each size and seed, and what past
runs measured: ``docs/kv_routing.md`` ("The benchmark's sizing").

Real part (:mod:`loadtests.kv.gateway_replay`): two vLLM CPU replicas (prefix caching, our hash
algorithm, KV events on ZMQ with a replay socket, dev mode for ``/reset_prefix_cache``, each
worker bound to its own CPUs) and one gateway process in front of them. Per policy: the gateway
is reloaded with that ``replica_selector``, both prefix caches are emptied, and the same trace is
replayed through the gateway at its own arrival times (``/v1/completions``, token-id prompts,
streamed). Judged by vLLM's own counters: hit rate = delta ``prefix_cache_hits`` / delta
``prefix_cache_queries`` (both replicas); TTFT at the client; throughput; max/mean requests per
replica.

Defaults, each for one reason:
- :func:`real_workload`: IDE chat sessions (2-3 turns, one system prompt per developer, Zipf
  repositories), so contexts are per session and the working set lies between one replica's
  cache and two: replica choice moves the hit rate only while the caches are the constraint.
- ``REAL_NUM_BLOCKS`` = 256 blocks of 32 tokens per replica: a policy that keeps a session on
  one replica fits, round-robin (a copy of every live session on each replica) does not.
- ``REAL_SEED`` = 1: the first of the simulated seeds, not chosen for its result.
- ``Settings.seeds`` 1-10: the two-replica simulation replays the real trace per seed and
  reports the means; fewer seeds were too few to judge the ratio to round-robin.
- :data:`TRACE_SHAPES`: ``per_session`` (the real part's) and ``shared_repos``
  (:func:`shared_workload`: many sessions share a hot repository's context, where a prefix index
  beats session affinity). One LRU cache of both replicas' size serving the whole trace
  (``pooled_lru_hit_rate``) is reported beside them, as a reference.

Scale part: :mod:`loadtests.kv.replica_sim` with 8 to 64 replicas and rising load, every policy
on the same trace (seed ``SIM_SEED``); TTFT p90 against load is drawn to ``<out>/kv_ttft_p90.png``.
The selector's own cost: decision time per request at 64 replicas (choice, and hashing timed
apart) in that simulation and on synthetic prompts, and index bytes per replica. ``--skip-real``
runs the simulations alone (no vLLM). SIGTERM or SIGINT stops the replicas and the gateway
(:class:`~loadtests.bench.servers.ServerFleet`) and exits 128+N.

Output: a table per part, the issue's targets judged on every part that measures them
(:mod:`loadtests.bench.kv.report`), then, as the last line, one JSON object with hit rates and
TTFT p90 per policy and the ratios of ours (``cache_aware``) to each baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import cast

from loadtests.bench.kv.report import OURS, summary
from loadtests.bench.servers import ServerFleet
from loadtests.kv.gateway_replay import GatewayUnderTest, RealResult, ReplicaUnderTest, run_policy
from loadtests.kv.replica_sim import (
    SeedRuns,
    SimReplicaSpec,
    SimResult,
    block_keys_of,
    run_over_seeds,
    run_policies,
)
from loadtests.kv.workload import KvWorkloadSpec, SegmentTokens, generate, scaled
from router.block_hash import DEFAULT_HASH_ALGO, BlockHasher
from router.cache_aware import CacheAwareSelector, PrefixIndex, PromptIndex
from router.replicas import ReplicaView
from router.selector_config import (
    CacheAwareConfig,
    LeastLoadConfig,
    RoundRobinConfig,
    SelectorConfig,
    SessionAffinityConfig,
)
from serving.build import ensure_demo_model
from serving.processes import Interrupted, ProcessFleet
from serving.replica import VllmReplica, find_free_port
from serving.vllm_config import CpuSettings, KvEventsSettings, VllmLaunchConfig

HASH_ALGO = DEFAULT_HASH_ALGO
KV_TOPIC = "kv"
REAL_BLOCK_SIZE = 32
REAL_NUM_BLOCKS = 256  # per replica; the trace's working set is ~400 (docs/kv_routing.md)
REAL_MAX_NUM_SEQS = 16
SIM_BLOCK_SIZE = 32
SIM_SEED = 1  # the scale part's trace
REAL_SEED = 1  # the real part's trace: the first of the seeds simulated (not picked)
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
    seeds: tuple[int, ...]  # trace seeds of the two-replica simulation (the first: real part's)

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if quick:
            return cls(True, 60, (8, 64), 15, (1.0, 4.0, 6.0, 7.0), tuple(range(1, 11)))
        return cls(
            False, 150, (8, 16, 32, 64), 40, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0),
            tuple(range(1, 11)),
        )  # fmt: skip


def real_workload(sessions: int, seed: int = REAL_SEED) -> KvWorkloadSpec:
    """The real part's trace (its sizing: docs/kv_routing.md); ``seed``: which draw of it."""
    return KvWorkloadSpec(
        sessions=sessions,
        clients=64,
        repos=64,
        zipf_s=0.5,
        system_tokens=256,
        repo_tokens=1024,
        user_tokens=(64, 192),
        answer_tokens=8,
        turns=(2, 3),
        session_rate=1.2,
        think_s=4.0,
        burst_every_s=8.0,
        burst_len_s=2.0,
        burst_factor=1.5,
        max_prompt_tokens=4000,
        seed=seed,
    )


def shared_workload(sessions: int, seed: int = REAL_SEED) -> KvWorkloadSpec:
    """The real part's trace with repository contexts shared across sessions (the simulated
    two-replica comparison's second shape; sizing: docs/kv_routing.md): 4 clients (IDE products,
    one system prompt each), 16 repositories (Zipf 1.1: a few hot ones) of 2048 tokens each."""
    return replace(real_workload(sessions, seed), clients=4, repos=16, zipf_s=1.1, repo_tokens=2048)


def sim_workload(replicas: int, sessions_per_replica: int) -> KvWorkloadSpec:
    return KvWorkloadSpec(
        sessions=sessions_per_replica * replicas,
        clients=5 * replicas,
        repos=8 * replicas,
        session_rate=0.25 * replicas,
        seed=SIM_SEED,
    )


# -- real part ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RealReplica:
    endpoints: ReplicaUnderTest
    process: VllmReplica

    @property
    def url(self) -> str:
        return self.endpoints.url


def core_sets(count: int) -> list[str]:
    """This process's CPUs split into ``count`` disjoint sets (``VLLM_CPU_OMP_THREADS_BIND``
    values; one CPU is shared round-robin when there are fewer CPUs than replicas). vLLM's
    "auto" binding would put every replica's worker on the same cores."""
    cpus = sorted(os.sched_getaffinity(0))
    per = max(1, len(cpus) // count)
    return [
        ",".join(str(c) for c in cpus[i * per : (i + 1) * per] or [cpus[i % len(cpus)]])
        for i in range(count)
    ]


def start_replicas(
    cache_dir: Path, count: int, num_blocks: int, fleet: ProcessFleet | None = None
) -> list[RealReplica]:
    """Launch ``count`` replicas, through ``fleet`` if given, which then stops them too (returns
    at once; :func:`wait_replicas` waits). KV events: PUB on an ipc path (vLLM binds it; nothing
    listens beyond this machine), replay ROUTER on 127.0.0.1."""
    model_dir = ensure_demo_model(cache_dir)
    ipc_dir = Path(tempfile.mkdtemp(prefix="kv-events-"))
    started: list[RealReplica] = []
    for cores in core_sets(count):
        port = find_free_port()
        events = KvEventsSettings(
            endpoint=f"ipc://{ipc_dir}/{port}.ipc",
            replay_endpoint=f"tcp://127.0.0.1:{find_free_port()}",
            topic=KV_TOPIC,
        )
        config = VllmLaunchConfig(
            model_dir=model_dir,
            cache_dir=cache_dir,
            port=port,
            enforce_eager=True,
            max_num_seqs=REAL_MAX_NUM_SEQS,
            block_size=REAL_BLOCK_SIZE,
            dev_mode=True,
            prefix_caching_hash_algo=HASH_ALGO,
            num_gpu_blocks_override=num_blocks,
            kv_events=events,
            cpu=CpuSettings(omp_threads_bind=cores),
        )
        process = VllmReplica(config, fleet=fleet)
        process.start()
        endpoints = ReplicaUnderTest(config.base_url, events.endpoint, events.replay_endpoint)
        started.append(RealReplica(endpoints, process))
    return started


async def wait_replicas(replicas: Sequence[RealReplica], timeout_s: float = 400.0) -> None:
    await asyncio.gather(*(r.process.wait_ready(timeout_s) for r in replicas))


def stop_replicas(replicas: Sequence[RealReplica]) -> None:
    for replica in replicas:
        replica.process.stop()


def start_gateway(
    fleet: ServerFleet, cache_dir: Path, out_dir: Path, replicas: Sequence[RealReplica]
) -> GatewayUnderTest:
    """A gateway process in front of ``replicas`` (returns at once; ``wait_ready`` waits)."""
    return GatewayUnderTest(
        fleet, out_dir, [r.endpoints for r in replicas], ensure_demo_model(cache_dir),
        find_free_port(),
    )  # fmt: skip


async def run_real(
    gateway: GatewayUnderTest, spec: KvWorkloadSpec, names: Sequence[str] | None = None
) -> dict[str, RealResult]:
    """Every policy (or ``names``) in turn on the same trace, through ``gateway``."""
    trace, tokens = generate(spec), SegmentTokens(spec)
    out: dict[str, RealResult] = {}
    for name, config in policies(REAL_BLOCK_SIZE).items():
        if names is None or name in names:
            out[name] = await run_policy(name, config, gateway, trace, tokens, KV_TOPIC)
            print(f"  real {name:20s} {_fmt_real(out[name])}", flush=True)
    return out


def _fmt_real(r: RealResult) -> str:
    return (
        f"hit {r.hit_rate:6.1%} (usage {r.usage_hit_rate:6.1%})  TTFT p50 "
        f"{r.ttft_p50_s * 1e3:6.0f} ms  p90 {r.ttft_p90_s * 1e3:6.0f} ms  "
        f"{r.throughput_rps:5.2f} req/s  max/mean {r.max_mean_requests:4.2f}  errors {r.errors}"
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
            out[n][factor] = run_policies(policies(SIM_BLOCK_SIZE), level, tokens, keys, n, spec)
            row = "  ".join(
                f"{k} {v.ttft_p90_s * 1e3:.0f}ms/{v.hit_rate:.0%}"
                for k, v in out[n][factor].items()
            )
            print(f"  sim n={n:2d} load x{factor:<4} p90/hit: {row}", flush=True)
    return out


TRACE_SHAPES = {"per_session": real_workload, "shared_repos": shared_workload}


def run_seeds(settings: Settings) -> dict[str, SeedRuns]:
    """Every policy on each trace shape (:data:`TRACE_SHAPES`; the first is the real part's),
    two simulated replicas with the real part's KV capacity, once per trace seed: how much the
    hit rates depend on the draw and on how much the sessions share."""
    spec = SimReplicaSpec(cache_blocks=REAL_NUM_BLOCKS, block_size=REAL_BLOCK_SIZE)
    out: dict[str, SeedRuns] = {}
    for shape, workload in TRACE_SHAPES.items():
        print(f"  trace shape {shape}", flush=True)
        draws = {seed: workload(settings.real_sessions, seed) for seed in settings.seeds}
        out[shape] = run_over_seeds(policies(REAL_BLOCK_SIZE), draws, 2, spec)
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
    """Decision time at ``replicas`` on synthetic prompts (choice only: random prefixes, loads,
    a full index), hashing per block (new and repeated; median over prompts), and index bytes
    per block in the steady state (full and evicting)."""
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
    hasher = BlockHasher(SIM_BLOCK_SIZE)
    hasher.block_keys(list(range(300, 8000)))  # every token id's encoding, once per process
    new: list[float] = []
    repeated: list[float] = []
    for _ in range(20):
        tokens = [rng.randrange(300, 8000) for _ in range(prompt_blocks * SIM_BLOCK_SIZE)]
        for times in (new, repeated):
            t0 = time.perf_counter()
            hasher.block_keys(tokens)
            times.append((time.perf_counter() - t0) / prompt_blocks)
    out = {
        "replicas": replicas,
        "decision_us_p50": statistics.median(choice) * 1e6,
        "decision_us_p99": statistics.quantiles(choice, n=100, method="inclusive")[98] * 1e6,
        "hash_us_per_block_new": statistics.median(new) * 1e6,
        "hash_us_per_block_repeated": statistics.median(repeated) * 1e6,
    }
    bound = CacheAwareConfig().max_index_blocks
    for name, cls in (("prompt_index", PromptIndex), ("event_index", PrefixIndex)):
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        index = cls(50_000, 50_000)
        for _ in range(1000):
            index.add_blocks(0, [rng.getrandbits(64) for _ in range(100)], 0.0)
        per_block = (tracemalloc.get_traced_memory()[0] - base) / index.total_entries()
        tracemalloc.stop()
        out[f"{name}_bytes_per_block"] = per_block
        out[f"{name}_bytes_per_replica_bound"] = per_block * bound
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench.kv", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--quick", action="store_true", default=bool(os.environ.get("BENCH_QUICK")))
    parser.add_argument("--skip-real", action="store_true")
    parser.add_argument("--skip-sim", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    settings = Settings.make(args.quick)
    cache = Path(os.environ.get("SWITCHYARD_CACHE") or Path.cwd() / ".cache").resolve()
    out_dir = args.out or cache / "bench" / "kv"
    replicas: list[RealReplica] = []
    real: dict[str, dict[str, RealResult]] = {}
    sim: dict[int, dict[float, dict[str, SimResult]]] = {}
    seeds: dict[str, SeedRuns] | None = None
    # Entered first: SIGTERM and SIGINT alike stop the replicas and the gateway on the way out.
    with ServerFleet(out_dir / "logs") as fleet:
        try:
            # First, while the machine is quiet: the vLLM boots below keep its cores busy.
            cost = selector_cost()
            print(f"  selector cost: {json.dumps({k: round(v, 2) for k, v in cost.items()})}")
            gateway = None
            if not args.skip_real:
                print("starting 2 vLLM CPU replicas and a gateway (the simulation runs meanwhile)")
                replicas = start_replicas(cache, 2, REAL_NUM_BLOCKS, fleet.processes)
                gateway = start_gateway(fleet, cache, out_dir, replicas)
            if not args.skip_sim:
                seeds = run_seeds(settings)
                sim = run_sim(settings)
                plot(sim, out_dir / "kv_ttft_p90.png")
                print(f"  plot: {out_dir / 'kv_ttft_p90.png'}", flush=True)
            if gateway is not None:
                asyncio.run(wait_replicas(replicas))
                gateway.wait_ready()
                for shape, workload in TRACE_SHAPES.items():
                    print(f"  real trace shape {shape}", flush=True)
                    spec = workload(settings.real_sessions, REAL_SEED)
                    real[shape] = asyncio.run(run_real(gateway, spec))
        except Interrupted as stop:
            print(f"interrupted ({stop}); stopping the replicas and the gateway", flush=True)
            return stop.exit_code
    report = summary(real, sim, cost, seeds)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_kv.json").write_text(json.dumps(report, indent=2))
    detail = {
        "real": {shape: {k: asdict(v) for k, v in runs.items()} for shape, runs in real.items()},
        "seeds": {
            shape: {k: [asdict(r) for r in v] for k, v in runs.runs.items()}
            for shape, runs in (seeds or {}).items()
        },
        "sim": {
            str(n): {str(f): {k: asdict(v) for k, v in row.items()} for f, row in lv.items()}
            for n, lv in sim.items()
        },
    }
    (out_dir / "bench_kv_detail.json").write_text(json.dumps(detail, indent=1))
    print("targets (value, met):")
    for name, parts in cast(dict[str, dict[str, dict[str, object]]], report["targets"]).items():
        row = ", ".join(
            f"{part} {v['value']} {'met' if v['met'] else 'NOT MET'}" for part, v in parts.items()
        )
        print(f"  {name}: {row}")
    print(json.dumps(report, separators=(",", ":")))
    return 0
