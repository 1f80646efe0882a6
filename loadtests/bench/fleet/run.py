"""``make bench-fleet``: one fleet of gateways on this machine (127.0.0.1 only). ``--quick``:
shorter cells and traces. The last line printed is one JSON object (figures and targets).

1. Workers: ``switchyard serve --workers 1`` then ``--workers 2`` (alternating, on a Redis
   fleet, recording off) in front of the frontier simulator, driven by the benchmark's load
   generator (:mod:`loadtests.bench.gateway.loadgen`, its own process): throughput and gateway
   CPU per request (the process tree: supervisor and workers), medians of the rounds. Two paths:
   ``passthrough`` (a local target: little gateway CPU a request, so the generator and the
   simulator, not the gateway, fill a small machine's cores) and ``translated`` (OpenAI chat to an
   Anthropic-format target through litellm: several ms a request, the gateway is the
   bottleneck). They share the cores with the gateway: the ratios say what a second worker buys
   here, not on a host of its own.
2. Propagation: three gateway processes (one worker each) on one Redis fleet. A replica drain,
   an undrain and a reload (a new routing version written on one gateway's disk only) are
   posted to one gateway while every gateway's ``/admin/fleet`` is polled every few
   milliseconds: the time until the last gateway shows the change (target: 1 s).
3. KV-aware choice across gateways, on real processes (:mod:`loadtests.bench.fleet.kv`): the same
   IDE-like trace (sessions of turns over shared repository contexts, ``loadtests.kv.workload``,
   rendered as chat text) is replayed through one gateway, then through three gateways behind a
   round-robin client, each time in front of two fresh simulated replicas whose prompt caches
   report ``cached_tokens`` (OpenAI's automatic caching: ``loadtests/frontier_sim/
   prompt_cache.py``).
   Hit rate = cached / prompt tokens; and the share of continuing turns that stayed on their
   session's replica. Target: three gateways within 3 points of one.
4. The same comparison simulated at fleet scale (``loadtests.kv.replica_sim``, bounded KV caches):
   one cache-aware selector; three sharing their decisions as the gateways do
   (``CacheAwareSelector.apply_routed``, each decision arriving 20 ms of simulated time later);
   three not sharing (what a fleet was before).
   Simplification: every selector sees the replicas' total in-flight counts.
5. On real replicas (:mod:`loadtests.bench.fleet.vllm`): three gateways against one in front of two
   vLLM CPU replicas, ``make bench-kv``'s real trace, judged by vLLM's prefix-cache counters
   (target: within 3 points); and a drain through one of the three, judged by the drained
   replica's own request counter (target: seen by all within 1 s, then nothing new).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from loadtests.bench.fleet.gateways import (
    ADMIN,
    ROOT,
    drop_fleet_keys,
    gateway_config,
    spawn_gateway,
    spawn_sim,
    wait_members,
)
from loadtests.bench.fleet.kv import default_tokenizer, kv_real, kv_sim
from loadtests.bench.fleet.vllm import kv_vllm
from loadtests.bench.gateway.loadgen import CellSpec
from loadtests.bench.servers import Server, ServerFleet, free_port
from serving.names import LOCAL_MODEL_NAME

TARGETS = {"propagation_s": 1.0, "hit_rate_gap_points": 3.0, "cpu_per_request_ratio": 1.10}


@dataclass(frozen=True)
class Settings:
    duration_s: float
    rounds: int
    concurrency: int
    repeats: int
    sessions: int
    sim_replicas: int
    sim_sessions: int
    vllm_sessions: int  # make bench-kv's real trace, quick and full alike

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if quick:
            return cls(3.0, 1, 32, 3, 40, 8, 160, 60)
        return cls(6.0, 2, 32, 5, 100, 8, 400, 60)


# -- 1. workers -----------------------------------------------------------------------------


def run_loadgen(spec: CellSpec) -> dict[str, Any]:
    argv = [sys.executable, "-m", "loadtests.bench.gateway.loadgen", json.dumps(asdict(spec))]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def workers_cells(settings: Settings, work: Path, redis_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with ServerFleet(work / "logs-workers") as servers:
        sim = spawn_sim(servers, "sim-workers")
        servers.wait_ready(sim, 60)
        for path in ("passthrough", "translated"):
            cells: dict[int, list[dict[str, float]]] = {1: [], 2: []}
            for round_ in range(settings.rounds):
                for workers in (1, 2):
                    cell = _workers_cell(servers, sim, work, redis_url, settings, path, workers)
                    cells[workers].append(cell)
                    print(f"  {path} workers={workers} round {round_}: {cell}", flush=True)
            med = {
                w: {k: statistics.median(c[k] for c in cs) for k in cs[0]}
                for w, cs in cells.items()
            }
            out[path] = {
                "workers_1": med[1],
                "workers_2": med[2],
                "throughput_ratio": med[2]["rps"] / med[1]["rps"],
                "cpu_per_request_ratio": med[2]["gateway_cpu_ms_per_request"]
                / med[1]["gateway_cpu_ms_per_request"],
            }
    return out


def _workers_cell(
    servers: ServerFleet,
    sim: Server,
    work: Path,
    redis_url: str,
    settings: Settings,
    path: str,
    workers: int,
) -> dict[str, float]:
    name = f"switchyard:bench-fleet:{uuid.uuid4().hex[:8]}"
    translated = path == "translated"
    config = gateway_config(free_port(), [sim.base_url], name, redis_url, None, translated)
    gateway, _ = spawn_gateway(servers, f"gw-{path}-w{workers}", config, work, workers)
    try:
        servers.wait_ready(gateway, 120, poll_s=0.05)
        wait_members(gateway.base_url, workers)
        spec = CellSpec(
            url=gateway.base_url + "/v1/chat/completions",
            concurrency=settings.concurrency,
            duration_s=settings.duration_s,
            warmup=200,
            max_requests=10**9,
            stream=False,
            max_tokens=16,
            model=LOCAL_MODEL_NAME,
            watch_pids={"gateway": gateway.pid, "simulator": sim.pid},
        )
        result = run_loadgen(spec)
    finally:
        servers.remove(gateway)
        drop_fleet_keys(redis_url, name)
    done = max(1, result["requests"])
    return {
        "rps": result["rps"],
        "gateway_cpu_ms_per_request": result["cpu_ms"]["gateway"] / done,
        "client_cpu_ms_per_request": result["client_cpu_ms"] / done,
        "errors": result["errors"],
        "p50_ms": (result["latency_ms"] or {}).get("p50", 0.0),
        "other_cpu_percent": result["other_cpu_percent"] or 0.0,
    }


# -- 2. propagation -------------------------------------------------------------------------


async def _time_to_all(
    urls: Sequence[str], change: Callable[[], Any], seen: Callable[[dict[str, Any]], bool]
) -> float:
    """Seconds from starting ``change`` until every gateway's view satisfies ``seen``."""
    async with httpx.AsyncClient(headers=ADMIN, timeout=30) as client:
        started = time.perf_counter()
        task = asyncio.get_running_loop().run_in_executor(None, change)
        arrived: dict[str, float] = {}
        while len(arrived) < len(urls):
            for url in urls:
                if url not in arrived and seen((await client.get(url + "/admin/fleet")).json()):
                    arrived[url] = time.perf_counter() - started
            await asyncio.sleep(0.002)
        await task
    return max(arrived.values())


def _post(url: str, path: str, body: Any = None) -> Callable[[], None]:
    def call() -> None:
        r = httpx.post(url + path, json=body, headers=ADMIN, timeout=60)
        r.raise_for_status()

    return call


def propagation(settings: Settings, work: Path, redis_url: str) -> dict[str, Any]:
    name = f"switchyard:bench-fleet:{uuid.uuid4().hex[:8]}"
    out: dict[str, list[float]] = {"drain": [], "undrain": [], "reload": []}
    try:
        with ServerFleet(work / "logs-propagation") as servers:
            sims = [spawn_sim(servers, f"sim-p{i}") for i in range(2)]
            for sim in sims:
                servers.wait_ready(sim, 60)
            replicas = [s.base_url for s in sims]
            configs = [gateway_config(free_port(), replicas, name, redis_url, None) for _ in "abc"]
            spawned = [
                spawn_gateway(servers, f"gw-p{i}", c, work, 1) for i, c in enumerate(configs)
            ]
            for gateway, _ in spawned:
                servers.wait_ready(gateway, 120, poll_s=0.05)
            urls = [g.base_url for g, _ in spawned]
            wait_members(urls[0], 3)
            replica = {"target": "local", "replica": replicas[1]}

            def drained(value: bool) -> Callable[[dict[str, Any]], bool]:
                def check(view: dict[str, Any]) -> bool:
                    return any(r["drained"] is value for r in view["replicas"])

                return check

            def version(want: str) -> Callable[[dict[str, Any]], bool]:
                return lambda view: bool(view["policy_version"] == want)

            for i in range(settings.repeats):
                change = _post(urls[i % 3], "/admin/replicas/drain", {**replica, "timeout_s": 5})
                out["drain"].append(asyncio.run(_time_to_all(urls, change, drained(True))))
                back = _post(urls[(i + 1) % 3], "/admin/replicas/undrain", replica)
                out["undrain"].append(asyncio.run(_time_to_all(urls, back, drained(False))))
                config, path = configs[0], spawned[0][1]
                config["routing"]["version"] = f"v{i + 2}"
                path.write_text(yaml.safe_dump(config))  # on gateway 0's disk only
                reload = _post(urls[0], "/admin/reload")
                out["reload"].append(asyncio.run(_time_to_all(urls, reload, version(f"v{i + 2}"))))
    finally:
        drop_fleet_keys(redis_url, name)
    return {kind: {"max_s": max(v), "p50_s": statistics.median(v)} for kind, v in out.items()}


# -- report ---------------------------------------------------------------------------------


PARTS = ("workers", "propagation", "kv", "sim", "vllm")


def targets(report: dict[str, Any]) -> dict[str, bool]:
    """Each target of the parts that ran, met or not."""
    out: dict[str, bool] = {}
    if "workers" in report:
        translated = report["workers"]["translated"]
        limit = TARGETS["cpu_per_request_ratio"]
        out["cpu_per_request_within_10pct"] = translated["cpu_per_request_ratio"] <= limit
        out["throughput_up"] = translated["throughput_ratio"] > 1.0
    if "propagation" in report:
        slowest = max(v["max_s"] for v in report["propagation"].values())
        out["propagation_within_1s"] = slowest <= TARGETS["propagation_s"]
    if "vllm" in report and "drain" in report["vllm"]:
        drain = report["vllm"]["drain"]
        out["vllm_drain_within_1s"] = drain["seen_by_all_s"] <= TARGETS["propagation_s"]
        out["vllm_drained_replica_got_nothing"] = (
            drain["drained_replica_new_requests"] == 0 and drain["probe_failures"] == 0
        )
    for part, label in (("kv_real", "real"), ("kv_sim", "sim"), ("vllm", "vllm")):
        gap = report.get(part, {}).get("hit_rate_gap_points")
        if gap is not None:
            out[f"hit_rate_within_3_points_{label}"] = gap <= TARGETS["hit_rate_gap_points"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.fleet", description=__doc__)
    parser.add_argument("--quick", action="store_true", default=bool(os.environ.get("BENCH_QUICK")))
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench-fleet")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--tokenizer-dir", type=Path, default=None)
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {PARTS}")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    settings = Settings.make(args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    if "workers" in parts:
        print("1. workers", flush=True)
        report["workers"] = workers_cells(settings, args.out, args.redis_url)
    if "propagation" in parts:
        print("2. propagation", flush=True)
        report["propagation"] = propagation(settings, args.out, args.redis_url)
        print(f"  {report['propagation']}", flush=True)
    if "kv" in parts:
        print("3. KV-aware choice across gateways (processes)", flush=True)
        tokenizer = args.tokenizer_dir or default_tokenizer()
        report["kv_real"] = (
            kv_real(settings.sessions, args.out, args.redis_url, tokenizer)
            if tokenizer is not None
            else {"skipped": "no demo model under .cache/models/tiny (run `make setup`)"}
        )
    if "sim" in parts:
        print("4. KV-aware choice across gateways (simulated)", flush=True)
        report["kv_sim"] = kv_sim(settings.sim_replicas, settings.sim_sessions)
    if "vllm" in parts:
        print("5. three gateways in front of two vLLM CPU replicas", flush=True)
        tokenizer = args.tokenizer_dir or default_tokenizer()
        cache = Path(os.environ.get("SWITCHYARD_CACHE") or ROOT / ".cache").resolve()
        report["vllm"] = (
            kv_vllm(settings.vllm_sessions, args.out, args.redis_url, cache, tokenizer)
            if tokenizer is not None
            else {"skipped": "no demo model under .cache/models/tiny (run `make setup`)"}
        )
    report["targets"] = targets(report)
    (args.out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report), flush=True)
    return 0
