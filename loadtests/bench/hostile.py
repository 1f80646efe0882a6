"""The hostile run: thousands of seeded hostile requests over every door of a real gateway.

    python -m loadtests.bench.hostile --requests 3000 --seed 1 [--concurrency 8] [--with-vllm]
                                    [--postgres postgresql://postgres@127.0.0.1:5432/test]

Starts, on 127.0.0.1: the frontier simulator, optionally one vLLM replica on CPU
(``--with-vllm``, the tiny demo model, reached as model ``vllm-local``), and a gateway process
with the SQLite store (or, ``--postgres URL``, a fresh schema of that database: the fleet's store)
and API keys required; creates two keys through the gateway's admin API
(the gateway's own key service); then fires the corpus of :mod:`loadtests.hostile.corpus`
(:func:`~loadtests.hostile.fire.fire`: bounded concurrency, a 10 s client deadline per request)
while :class:`~loadtests.hostile.fire.GatewayWatch` probes ``/health`` every 50 ms and scrapes
``/metrics`` for ``switchyard_breaker_state``. Then the gateway is stopped (its writer flushed)
and its store read: every answered inference request's ``x-request-id`` must have exactly
one ``inference`` row.

Prints: the status histogram per door; every 5xx with a repro (door, request, first 300 bytes
of the body); the other findings of :func:`~loadtests.hostile.fire.judge`; hangs; breakers;
the record check; the /health latency (event-loop lag). The LAST line is one JSON object with
the figures. Everything (config, logs, ``findings.jsonl``) is kept under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml

from loadtests.bench.servers import Server, ServerFleet, free_port
from loadtests.bench.sim_gateway import simulator_aliases, simulator_backends
from loadtests.hostile.corpus import Targets, hostile_corpus
from loadtests.hostile.fire import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_S,
    Credentials,
    Finding,
    GatewayWatch,
    Outcome,
    check_records,
    fire,
    judge,
    repro,
    status_histogram,
    store_stats,
)
from serving.names import ADMIN_TOKEN_ENV, LOCAL_MODEL_NAME

VLLM_ALIAS = "vllm-local"
READY_TIMEOUT_S = 120.0
VLLM_READY_TIMEOUT_S = 400.0
FLUSH_TIMEOUT_S = 30.0


def gateway_config(
    sim_url: str, store_url: str, spool: Path, vllm_url: str | None
) -> dict[str, Any]:
    """The test suite's four targets (all on the simulator), the store, keys required."""
    backends = simulator_backends(sim_url)
    aliases = simulator_aliases()
    if vllm_url is not None:
        backends["vllm"] = {"kind": "vllm", "model": LOCAL_MODEL_NAME, "replicas": [vllm_url]}
        aliases[VLLM_ALIAS] = "vllm"  # no fallback: what vLLM answers is what the client gets
    return {
        "gateway": {"limits": {"drain_timeout_s": 2}, "admin_token_env": ADMIN_TOKEN_ENV},
        "backends": backends,
        "routing": {
            "default": "local",
            "aliases": aliases,
            "rules": [
                {
                    "name": "tagged",
                    "match": {"route_hint": ["frontier"]},
                    "target": "frontier-openai",
                },
                {
                    "name": "long",
                    "match": {"min_prompt_tokens": 2000},
                    "target": "frontier-anthropic",
                },
            ],
            "fallbacks": {"local": ["frontier-openai"]},
        },
        "store": {"enabled": True, "url": store_url, "spool_dir": str(spool)},
        "auth": {"required": True},
    }


def start_vllm(cache: Path, log_path: Path) -> tuple[Any, str]:
    """One vLLM replica on CPU serving the demo model; (replica, base URL) once it serves."""
    from serving.build import ensure_demo_model
    from serving.replica import VllmReplica, find_free_port
    from serving.vllm_config import VllmLaunchConfig

    config = VllmLaunchConfig(
        model_dir=ensure_demo_model(cache),
        cache_dir=cache,
        port=find_free_port(),
        device="cpu",
        enforce_eager=True,
        max_num_seqs=16,
    )
    replica = VllmReplica(config, log_path=log_path)
    replica.start()
    try:
        asyncio.run(replica.wait_ready(VLLM_READY_TIMEOUT_S))
    except BaseException:
        replica.stop()
        raise
    return replica, replica.base_url


def targets(with_vllm: bool) -> Targets:
    """The default targets, plus the vLLM replica (for valid traffic and the landmarks)."""
    t = Targets()
    if not with_vllm:
        return t
    return Targets(
        (*t.models, VLLM_ALIAS),
        (*t.completion_models, VLLM_ALIAS),
        (*t.landmark_models, VLLM_ALIAS),
        (*t.landmark_completion_models, VLLM_ALIAS),
    )


def create_keys(base_url: str, admin_token: str) -> Credentials:
    auth = {"authorization": f"Bearer {admin_token}"}
    keys = []
    for name in ("hostile-a", "hostile-b"):
        r = httpx.post(f"{base_url}/admin/keys", json={"name": name}, headers=auth, timeout=30)
        r.raise_for_status()
        keys.append(r.json()["key"])
    return Credentials(keys[0], keys[1], admin_token)


def wait_flushed(base_url: str) -> dict[str, float]:
    """Until the record writer's queue is empty (or FLUSH_TIMEOUT_S); its last counters."""
    stats: dict[str, float] = {}
    deadline = time.monotonic() + FLUSH_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            stats = store_stats(httpx.get(f"{base_url}/metrics", timeout=10).text)
        except httpx.HTTPError:
            break
        if stats.get("queue_depth", 0) == 0 and stats.get("overflow_depth", 0) == 0:
            break
        time.sleep(0.5)
    return stats


class HostileStore:
    """Where the gateway records: a SQLite file under the run's folder, or a fresh schema of a
    PostgreSQL database (``--postgres URL``; the schema is dropped after the run)."""

    def __init__(self, out: Path, postgres_url: str | None) -> None:
        self.postgres_url = postgres_url
        self.db = out / "traffic.db"
        self.schema = f"hostile_{secrets.token_hex(5)}"

    @property
    def url(self) -> str:
        if self.postgres_url is None:
            return f"sqlite:///{self.db}"
        joiner = "&" if "?" in self.postgres_url else "?"
        return f"{self.postgres_url}{joiner}options=-csearch_path%3D{self.schema}"

    def create(self) -> None:
        if self.postgres_url is not None:
            with psycopg.connect(self.postgres_url, connect_timeout=5, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {self.schema}")

    def rows(self) -> list[tuple[str, int]]:
        """(id, status) of every inference row (the gateway has stopped)."""
        sql = "SELECT id, status FROM inference"
        if self.postgres_url is None:
            with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True) as lite:
                return [(str(i), int(s)) for i, s in lite.execute(sql)]
        with psycopg.connect(self.url, connect_timeout=5) as conn:
            return [(str(i), int(s)) for i, s in conn.execute(sql)]

    def drop(self) -> None:
        if self.postgres_url is not None:
            with psycopg.connect(self.postgres_url, connect_timeout=5, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")


def spool_counts(spool: Path) -> dict[str, int]:
    """Records left in the spool (not stored) and dead letters (refused by the database)."""
    waiting = sum(len(p.read_bytes().splitlines()) for p in spool.glob("segment-*.jsonl"))
    dead = spool / "rejected.jsonl"
    return {
        "spooled_left": waiting,
        "dead_letters": len(dead.read_bytes().splitlines()) if dead.exists() else 0,
    }


def log_lines(server: Server, *needles: str) -> dict[str, int]:
    text = server.log_path.read_text(errors="replace") if server.log_path.exists() else ""
    return {n: text.count(n) for n in needles}


def print_report(outcomes: list[Outcome], findings: list[Finding], show: int) -> None:
    print("status per door:")
    for door, hist in status_histogram(outcomes).items():
        print(f"  {door:<13}" + "  ".join(f"{k}: {v}" for k, v in hist.items()))
    five = [f for f in findings if f.kind == "5xx"]
    print(f"\n5xx: {len(five)}")
    groups: dict[tuple[str, int | None, str], list[Finding]] = defaultdict(list)
    for f in five:
        family = ".".join(p for p in f.outcome.case.family.split(".") if not p.isdigit())
        groups[(f.outcome.case.door, f.outcome.status, family)].append(f)
    for (door, status, family), fs in sorted(groups.items(), key=lambda g: -len(g[1])):
        print(f"  {len(fs):4d} x {status} {door} {family}: {fs[0].detail[:160]!r}")
    for f in five[:show]:
        r = repro(f.outcome)
        print(
            f"  #{r['index']} {r['status']} {r['door']} {r['request']} {r['headers']} "
            f"body[:300]={r['body_head']!r}"
        )
    if len(five) > show:
        print(f"  ... {len(five) - show} more in findings.jsonl")
    for kind, count in Counter(f.kind for f in findings if f.kind != "5xx").most_common():
        print(f"\n{kind}: {count}")
        by_family = Counter(f.outcome.case.family for f in findings if f.kind == kind)
        for family, n in by_family.most_common(12):
            first = next(f for f in findings if f.kind == kind and f.outcome.case.family == family)
            r = repro(first.outcome, 200)
            print(
                f"  {n:4d} x {family} -> {r['status']} {first.detail[:100]!r} "
                f"body[:200]={r['body_head']!r}"
            )


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out / f"seed{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    store, spool = HostileStore(out, args.postgres), out / "spool"
    store.create()
    token = secrets.token_urlsafe(24)
    replica = None
    with ServerFleet(out / "logs") as fleet:
        try:
            port = free_port()
            argv = [sys.executable, "-m", "loadtests.frontier_sim", "--port", str(port)]
            sim = fleet.spawn("frontier-sim", argv, port, "/v1/models")
            fleet.wait_ready(sim, READY_TIMEOUT_S)
            vllm_url = None
            if args.with_vllm:
                print("starting vLLM (CPU) ...", file=sys.stderr)
                replica, vllm_url = start_vllm(args.cache, out / "logs" / "vllm.log")
            config = out / "switchyard.yaml"
            settings = gateway_config(sim.base_url, store.url, spool, vllm_url)
            config.write_text(yaml.safe_dump(settings))
            port = free_port()
            argv = [sys.executable, "-m", "gateway", "--config", str(config), "--port", str(port)]
            env = {ADMIN_TOKEN_ENV: token, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
            gw = fleet.spawn("gateway", argv, port, "/health", env=env)
            fleet.wait_ready(gw, READY_TIMEOUT_S)
            creds = create_keys(gw.base_url, token)
            corpus = hostile_corpus(args.seed, args.requests, targets(vllm_url is not None))
            skip = tuple(p for p in args.skip.split(",") if p)
            cases = (c for c in corpus if not (skip and c.family.startswith(skip)))
            print(f"firing {args.requests} requests at {gw.base_url} ...", file=sys.stderr)
            started = time.perf_counter()
            with GatewayWatch(gw.base_url) as watch:
                outcomes = asyncio.run(
                    fire(
                        gw.base_url,
                        cases,
                        creds,
                        concurrency=args.concurrency,
                        timeout_s=args.timeout_s,
                    )
                )
            duration = time.perf_counter() - started
            writer = wait_flushed(gw.base_url)
            fleet.remove(gw)  # SIGTERM: in-flight requests finish, the writer flushes
            logged = log_lines(gw, "unhandled error", "died", "lost", "refused by the database")
        finally:
            if replica is not None:
                replica.stop()
    findings = [f for o in outcomes for f in judge(o, args.timeout_s)]
    try:
        records = check_records(outcomes, store.rows())
    finally:
        store.drop()
    with (out / "findings.jsonl").open("w") as fh:
        for f in findings:
            fh.write(json.dumps({"kind": f.kind, "detail": f.detail, **repro(f.outcome)}) + "\n")
    with (out / "outcomes.jsonl").open("w") as fh:
        for o in outcomes:
            fh.write(json.dumps({**repro(o, 120), "request_id": o.request_id}) + "\n")
    print(
        f"hostile run: {len(outcomes)} requests, seed {args.seed}, concurrency "
        f"{args.concurrency}, {duration:.1f} s; files in {out}\n"
    )
    print_report(outcomes, findings, args.show)
    kinds = Counter(f.kind for f in findings)
    lag = watch.lag()
    summary = records.summary()
    print(f"\nhangs over {args.timeout_s:.0f} s: {kinds['hang']}   no answer: {kinds['no_answer']}")
    print(f"breakers (max state seen, 0 closed 1 half-open 2 open): {watch.breaker_max}")
    print(f"records: {summary}")
    print(f"store writer: {writer}  spool: {spool_counts(spool)}  gateway log: {logged}")
    stalls = watch.stalls(outcomes)
    for stall in stalls:
        print(f"  /health took {stall['health_ms']} ms; in flight: {stall['in_flight']}")
    print(
        f"/health every 50 ms: max {lag['max_ms']} ms, p99 {lag['p99_ms']} ms, "
        f"{lag['probes']} probes, {lag['failures']} failed"
    )
    five = [f for f in findings if f.kind == "5xx"]
    return {
        "requests": len(outcomes),
        "skipped": args.skip,
        "seed": args.seed,
        "with_vllm": bool(args.with_vllm),
        "store": "postgres" if args.postgres else "sqlite",
        "duration_s": round(duration, 1),
        "by_door": status_histogram(outcomes),
        "five_xx": len(five),
        "five_xx_by_door": dict(Counter(f.outcome.case.door for f in five)),
        "hangs": kinds["hang"],
        "findings": dict(kinds),
        "breaker_opened": watch.breaker_opened,
        "breaker_max_state": watch.breaker_max,
        "records": summary,
        "records_ok": records.ok,
        "store_writer": {
            k: writer.get(k)
            for k in ("written_total", "rejected_total", "lost_total", "write_errors_total")
        },
        "spool": spool_counts(spool),
        "lag_ms": lag,
        "stalls_over_1s": len(stalls),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench.hostile", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S)
    parser.add_argument("--with-vllm", action="store_true", help="also a real vLLM replica")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="record to a fresh schema of this PostgreSQL database instead of SQLite",
    )
    parser.add_argument("--out", type=Path, default=Path(".cache/hostile"))
    parser.add_argument("--cache", type=Path, default=Path(".cache"), help="models (vLLM)")
    parser.add_argument(
        "--skip", default="", help="family prefixes not to send, e.g. deep_nesting,landmark.deep"
    )
    parser.add_argument("--show", type=int, default=1000, help="5xx repros printed, at most")
    figures = run(parser.parse_args(argv))
    print(json.dumps(figures, sort_keys=True))
    clean = (
        figures["five_xx"] == 0
        and figures["hangs"] == 0
        and not figures["breaker_opened"]
        and figures["records_ok"]
    )
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
