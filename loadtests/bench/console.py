"""Page timings of the ops console on a store of 1M recorded inferences (a command, not a test).

    python -m loadtests.bench.console --dsn postgresql://postgres@127.0.0.1:5432/test \
        --rows 1000000 [--schema console_bench] [--loads 5] [--reseed]

1. Seeds the schema ``--schema`` (its own: the database's other users are untouched) with
   ``--rows`` synthetic inferences spread over the 14 days before now, their feedback, API keys
   and model versions (:mod:`gateway.console.synthetic`), by ``COPY``, then ``ANALYZE``. A schema
   already holding that many rows, the newest less than ``--fresh-h`` hours old, is reused
   (the pages' windows end now); ``--reseed`` always seeds again. Then the closed hours are
   rolled up (:mod:`traffic.store.rollup`), as a gateway does in the background: all of them
   after a seeding, the new ones on a reused store (both timed).
2. Starts a gateway on a loopback port (port 0) over that store, logs in to the console with a
   fresh admin token, and loads every page ``--loads`` times (the first load is a warm-up,
   not counted), a routing change's replay preview included.
3. Prints a table of each page's median server time (the ``Server-Timing`` header the console
   sets) and median total time as the client saw it, then one JSON line: the figures, the row
   count, and whether every page answered in under ``--target-ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import httpx
import psycopg

from gateway.app import create_app
from gateway.config import parse_config
from gateway.console.synthetic import api_keys, generate, model_versions
from gateway.serve import GatewayServer, uvicorn_config
from loadtests.bench.store import with_schema
from serving.names import ADMIN_TOKEN_ENV
from traffic.store import StoreConfig, open_store
from traffic.store.queries import Codec, encode_rows, select_list
from traffic.store.rollup import dims, roll_up
from traffic.store.schema import FEEDBACK, INFERENCE, TABLES

SPAN: Final = timedelta(days=14)
DEFAULT_SCHEMA: Final = "console_bench"
DEFAULT_LOADS: Final = 5
DEFAULT_TARGET_MS: Final = 1000.0
DEFAULT_FRESH_H: Final = 1.0
SEED: Final = 20
CLASS_TAG: Final = "family"  # the synthetic traffic's class tag


def bench_config(store_url: str, flywheel_dir: Path) -> dict[str, Any]:
    """A gateway over the bench store; its targets are never called (no traffic is sent)."""
    dead = "http://127.0.0.1:9"
    return {
        "backends": {
            "local": {"kind": "vllm", "model": "switchyard-local", "replicas": [dead]},
            "frontier-openai": {"kind": "litellm", "model": "openai/gpt-4o-mini", "api_base": dead},
            "frontier-anthropic": {
                "kind": "litellm",
                "model": "anthropic/claude-haiku-4-5",
                "api_base": dead,
            },
        },
        "routing": {
            "default": "local",
            "rules": [
                {
                    "name": "tools-to-frontier",
                    "match": {"has_tools": True},
                    "target": "frontier-anthropic",
                }
            ],
            "learned": {"local_target": "local", "frontier_target": "frontier-openai"},
        },
        "store": {"url": store_url, "spool_dir": str(flywheel_dir / "spool")},
        "auth": {"required": False},
        "console": {"flywheel_dir": str(flywheel_dir), "class_tag": CLASS_TAG},
    }


async def _state(url: str) -> tuple[int, datetime | None]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*), max(ts) FROM inference")
        row = await cur.fetchone()
        assert row is not None
        return int(row[0]), row[1]


async def seed(url: str, rows: int) -> float:
    """Empty the schema's tables and seed ``rows`` inferences; returns the seconds it took."""
    started = time.perf_counter()
    store = open_store(StoreConfig(url=url))
    await store.connect()  # migrations
    until = datetime.now(UTC)
    try:
        for key in api_keys(until):
            await store.create_api_key(key)
        for version in model_versions(until, SPAN):
            await store.upsert_model_version(version)
    finally:
        await store.close()
    await copy_synthetic(url, rows, until, SPAN, SEED)
    return time.perf_counter() - started


async def copy_synthetic(url: str, rows: int, until: datetime, span: timedelta, seed: int) -> None:
    """COPY ``rows`` synthetic inferences and their feedback (``gateway.console.synthetic``,
    ending at ``until`` over ``span``) into the store at ``url``, then ANALYZE."""
    codec = Codec("postgres")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for n, batch in enumerate(generate(rows, until=until, span=span, seed=seed)):
            async with conn.cursor() as cur:
                for table, records in ((INFERENCE, batch.inferences), (FEEDBACK, batch.feedback)):
                    sql = f"COPY {table.name} ({select_list(table)}) FROM STDIN"
                    async with cur.copy(sql) as copy:
                        for row in encode_rows(table, records, codec):
                            await copy.write_row(row)
            if n % 20 == 0:
                print(f"  seeded {(n + 1) * len(batch.inferences):,} rows", file=sys.stderr)
        await conn.execute("ANALYZE")


async def prepare(dsn: str, schema: str, rows: int, reseed: bool, fresh_h: float) -> str:
    """The bench store's URL, seeded unless a fresh enough one is there."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
        raise SystemExit(f"--schema must be a plain lowercase identifier, got {schema!r}")
    url = with_schema(dsn, schema)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    store = open_store(StoreConfig(url=url))
    await store.connect()  # creates the tables in a new schema
    await store.close()
    count, newest = await _state(url)
    fresh = newest is not None and datetime.now(UTC) - newest < timedelta(hours=fresh_h)
    if count == rows and fresh and not reseed:
        print(f"reusing {count:,} rows in schema {schema}", file=sys.stderr)
        await catch_up(url)
        return url
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"TRUNCATE {', '.join(t.name for t in TABLES)}")
    print(f"seeding {rows:,} rows into schema {schema}", file=sys.stderr)
    seconds = await seed(url, rows)
    print(f"seeded in {seconds:.0f} s", file=sys.stderr)
    await catch_up(url)
    return url


async def catch_up(url: str) -> None:
    """Roll up the closed hours, as the gateway does in the background (timed)."""
    started = time.perf_counter()
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        done = await roll_up(store, dims(CLASS_TAG), datetime.now(UTC))
    finally:
        await store.close()
    hours = sum(done.values())
    print(f"rolled up {hours} hours in {time.perf_counter() - started:.1f} s", file=sys.stderr)


class Gateway:
    """The gateway app on a loopback port in a background thread."""

    def __init__(self, config: dict[str, Any]) -> None:
        cfg = parse_config(config)
        self.app = create_app(cfg)
        self.server = GatewayServer(uvicorn_config(self.app, cfg, "127.0.0.1", 0), self.app)
        self.server.config.log_level = "warning"
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise SystemExit("the gateway did not start")
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def _server_ms(response: httpx.Response) -> float:
    match = re.search(r"dur=([0-9.]+)", response.headers.get("server-timing", ""))
    return float(match.group(1)) if match else float("nan")


def _pages(client: httpx.Client) -> list[tuple[str, str, str, dict[str, str] | None]]:
    """(name, method, path, form) of every page, ids taken from the store's own pages."""
    traffic = client.get("/ui/traffic").text
    exchange = re.search(r"/ui/traffic/([0-9a-f-]{36})", traffic)
    episode = re.search(r"/ui/episodes/([\w.-]+)", traffic)
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/keys").text)
    change = {
        "version": "v1-c1",
        "default": "local",
        "rules": "[]",
        "quality_target": "0.9",
        "exploration_share": "0.1",
        "min_samples": "20",
        "state_file": "",
        "csrf": csrf.group(1) if csrf else "",
    }
    pages: list[tuple[str, str, str, dict[str, str] | None]] = [
        ("overview 1h by scorer bucket", "GET", "/ui/overview?window=1h&by=p_local", None),
        ("overview 6h by target", "GET", "/ui/overview?window=6h", None),
        ("overview 24h by target", "GET", "/ui/overview", None),
        ("overview 24h by decision", "GET", "/ui/overview?by=decision", None),
        ("overview 24h by scorer bucket", "GET", "/ui/overview?by=p_local", None),
        ("overview 24h by class", "GET", "/ui/overview?by=tag:family", None),
        ("overview 7d by target", "GET", "/ui/overview?window=7d", None),
        ("overview 30d by key", "GET", "/ui/overview?window=30d&by=api_key_id", None),
        ("traffic 24h", "GET", "/ui/traffic", None),
        ("traffic 24h target + feedback", "GET", "/ui/traffic?target=local&feedback=edited", None),
        ("traffic 24h text search", "GET", "/ui/traffic?text=merge_spans", None),
        ("traffic 7d by key", "GET", "/ui/traffic?window=7d&key=key-ci-bots", None),
        ("routing", "GET", "/ui/routing", None),
        ("routing replay preview", "POST", "/ui/routing/preview", change),
        ("models", "GET", "/ui/models", None),
        ("flywheel", "GET", "/ui/flywheel", None),
        ("keys & budgets 24h", "GET", "/ui/keys", None),
        ("keys & budgets 30d", "GET", "/ui/keys?window=30d", None),
        ("changes", "GET", "/ui/history", None),
    ]
    if exchange:
        pages.insert(12, ("one exchange", "GET", f"/ui/traffic/{exchange.group(1)}", None))
    if episode:
        pages.insert(13, ("one episode", "GET", f"/ui/episodes/{episode.group(1)}", None))
    return pages


def measure(base_url: str, token: str, loads: int) -> list[dict[str, Any]]:
    with httpx.Client(base_url=base_url, timeout=120) as client:
        login = client.post(
            "/ui/login", data={"operator": "bench", "token": token, "next": "/ui/overview"}
        )
        if login.status_code != 303:
            raise SystemExit(f"console login failed: {login.status_code} {login.text[:200]}")
        figures = []
        for name, method, path, form in _pages(client):
            server, total = [], []
            for i in range(loads + 1):
                t0 = time.perf_counter()
                response = client.request(method, path, data=form)
                elapsed = (time.perf_counter() - t0) * 1000
                if response.status_code != 200:
                    raise SystemExit(f"{name}: {response.status_code} {response.text[:300]}")
                if i > 0:  # the first load warms caches
                    server.append(_server_ms(response))
                    total.append(elapsed)
            figures.append(
                {
                    "page": name,
                    "path": path,
                    "server_ms": round(statistics.median(server), 1),
                    "total_ms": round(statistics.median(total), 1),
                    "bytes": len(response.content),
                }
            )
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.console", description=__doc__)
    parser.add_argument("--dsn", required=True, help="PostgreSQL URL of the database to use.")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--schema", default=DEFAULT_SCHEMA)
    parser.add_argument("--loads", type=int, default=DEFAULT_LOADS, help="Counted loads per page.")
    parser.add_argument(
        "--reseed", action="store_true", help="Seed even if a fresh store is there."
    )
    parser.add_argument("--fresh-h", type=float, default=DEFAULT_FRESH_H)
    parser.add_argument("--target-ms", type=float, default=DEFAULT_TARGET_MS)
    args = parser.parse_args(argv)
    url = asyncio.run(prepare(args.dsn, args.schema, args.rows, args.reseed, args.fresh_h))
    rows, _ = asyncio.run(_state(url))
    token = secrets.token_urlsafe(24)
    os.environ[ADMIN_TOKEN_ENV] = token
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    workdir = Path(os.environ.get("SWITCHYARD_CACHE", ".cache")) / "console-bench"
    with Gateway(bench_config(url, workdir)) as base_url:
        figures = measure(base_url, token, args.loads)
    print(f"{'page':<34}{'server ms':>11}{'total ms':>10}{'KiB':>8}")
    for f in figures:
        print(
            f"{f['page']:<34}{f['server_ms']:>11.1f}{f['total_ms']:>10.1f}{f['bytes'] / 1024:>8.0f}"
        )
    worst = max(f["total_ms"] for f in figures)
    summary = {
        "rows": rows,
        "loads": args.loads,
        "pages": {
            f["page"]: {"server_ms": f["server_ms"], "total_ms": f["total_ms"]} for f in figures
        },
        "max_total_ms": worst,
        "target_ms": args.target_ms,
        "all_under_target": worst < args.target_ms,
    }
    print(json.dumps(summary))
    return 0 if summary["all_under_target"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
