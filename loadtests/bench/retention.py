"""Retention on a PostgreSQL store of 1M synthetic inferences: a day's partition dropped, against
the same day's rows deleted one by one, with reads running (a command, not a test).

    python -m loadtests.bench.retention --dsn postgresql://postgres@127.0.0.1:5432/test \
        --rows 1000000 [--schema retention_bench] [--readers 4]

1. Seeds its own schema (``--schema``, made anew, dropped at the end; nothing else is touched) as
   ``make bench-console`` seeds its store (:mod:`gateway.console.synthetic`: ``--rows``
   inferences, their feedback, six keys), over the 14 whole days (UTC) before today, into day
   partitions made first (and a week ahead, as a pass makes them), by ``COPY``, then
   ``ANALYZE``.
2. Starts ``--readers`` threads, each on a connection of its own, reading what the console and
   the exporters read, round robin: an inference by id with its feedback, a page of 100 rows in
   id order, an hour's counts by route target; all on the days no pass touches. They read alone
   for ``--baseline-s`` first.
3. Runs three retention passes (:func:`traffic.retention.retention_pass`, the whole pass: the
   day's ids read, lineage, spool, the store, the audit entry), each taking one day (~1/14 of
   the rows), clocks set so: ``drop`` (default window, every row of the oldest day past: its
   partitions dropped), ``delete`` (the next day, ``partitions=False``: the row deletes SQLite
   and the ``before`` partition get), ``rebuild`` (the next, with the ``evals`` key given a
   30-day window: its sixth of the day copied into new partitions, the rest dropped).
4. Prints each pass's seconds and rows, and the reads that overlapped it (count, p50, p99, max
   ms) against the baseline's; the last line is one JSON object, with whether the drop's pass
   took under ``--target-s``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_time
from itertools import pairwise
from typing import Any, Final

import psycopg

from gateway.console.synthetic import api_keys
from loadtests.bench.console import copy_synthetic
from loadtests.bench.store import with_schema
from traffic.retention import retention_pass
from traffic.store import StoreBackend, StoreConfig, open_store
from traffic.store.ids import min_id_at
from traffic.store.partition_sql import day_bounds
from traffic.store.partitions import DayPartitions
from traffic.store.queries import select_list
from traffic.store.retention_windows import key_subject, set_window
from traffic.store.schema import INFERENCE

DAYS: Final = 14
DEFAULT_SCHEMA: Final = "retention_bench"
DEFAULT_READERS: Final = 4
DEFAULT_BASELINE_S: Final = 5.0
DEFAULT_TARGET_S: Final = 1.0
WINDOW_DAYS: Final = 12  # the default window of every pass
SEED: Final = 47
KEPT_KEY: Final = "key-evals"  # the rebuild's longer window


@dataclass
class Reads:
    """Every read: (start, seconds), appended by the reader threads."""

    done: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def between(self, start: float, end: float) -> dict[str, Any]:
        """The reads that overlapped ``start .. end``: count and latency figures (ms)."""
        ms = sorted(s * 1000 for t, s in list(self.done) if t < end and t + s > start)
        if not ms:
            return {"count": 0}
        return {
            "count": len(ms),
            "p50_ms": round(statistics.median(ms), 1),
            "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
            "max_ms": round(ms[-1], 1),
        }


def reader(url: str, ids: list[str], hours: list[tuple[str, str]], reads: Reads, n: int) -> None:
    rng = random.Random(n)
    queries = (
        lambda: (
            "SELECT i.id, i.route_target, f.kind FROM inference i LEFT JOIN feedback f"
            " ON f.inference_id = i.id WHERE i.id = %s",
            [rng.choice(ids)],
        ),
        lambda: (
            f"SELECT {select_list(INFERENCE)} FROM inference WHERE id > %s ORDER BY id LIMIT 100",
            [rng.choice(ids)],
        ),
        lambda: (
            "SELECT route_target, count(*), avg(latency_ms) FROM inference"
            " WHERE id >= %s AND id < %s GROUP BY route_target",
            list(rng.choice(hours)),
        ),
    )
    with psycopg.connect(url, autocommit=True) as conn:
        turn = n
        while not reads.stop.is_set():
            sql, params = queries[turn % len(queries)]()
            turn += 1
            started = time.perf_counter()
            try:
                conn.execute(sql, params).fetchall()
            except psycopg.Error as exc:
                reads.errors.append(str(exc).splitlines()[0])
                continue
            reads.done.append((started, time.perf_counter() - started))


async def seed(url: str, rows: int, today: date) -> float:
    """The schema's store with ``rows`` inferences over the :data:`DAYS` days before
    ``today``, in day partitions; the seconds it took."""
    started = time.perf_counter()
    store = open_store(StoreConfig(url=url))
    await store.connect()  # migrations: partitioned tables
    until = datetime.combine(today, day_time(), UTC)
    try:
        for key in api_keys(until):
            await store.create_api_key(key)
    finally:
        await store.close()
    parts = await DayPartitions.open(url)
    try:
        await parts.ensure(today + timedelta(days=d) for d in range(-DAYS, 8))
    finally:
        await parts.close()
    await copy_synthetic(url, rows, until, timedelta(days=DAYS), SEED)
    return time.perf_counter() - started


async def read_targets(url: str, today: date) -> tuple[list[str], list[tuple[str, str]]]:
    """Ids and hours of the last three days (no pass touches them)."""
    since = today - timedelta(days=3)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT id FROM inference WHERE id >= %s ORDER BY random() LIMIT 5000",
            [day_bounds(since)[0]],
        )
        ids = [str(r[0]) for r in await cur.fetchall()]
    start = datetime.combine(since, day_time(), UTC)
    edges = [min_id_at(start + timedelta(hours=h)) for h in range(73)]
    return ids, list(pairwise(edges))


async def timed_pass(
    store: StoreBackend, now: datetime, *, partitions: bool
) -> tuple[float, float, dict[str, Any]]:
    started = time.perf_counter()
    report = await retention_pass(store, WINDOW_DAYS, now=now, partitions=partitions)
    ended = time.perf_counter()
    days = [
        {"day": d.day.isoformat(), "method": d.method, "expired": d.expired, "kept": d.kept}
        for d in report.days
    ]
    return started, ended, {"days": days, "deleted": report.deleted}


async def passes(url: str, today: date, reads: Reads, baseline_s: float) -> dict[str, Any]:
    """Step 3 (module docstring), after the readers' baseline."""
    started = time.perf_counter()
    await asyncio.sleep(baseline_s)
    figures: dict[str, Any] = {"baseline_reads": reads.between(started, time.perf_counter())}
    store = open_store(StoreConfig(url=url))
    await store.connect()
    noon = datetime.combine(today, day_time(12), UTC)
    try:
        plan = (
            ("drop", noon - timedelta(days=1), True),  # the oldest day: every row past
            ("delete", noon, False),  # the next: row deletes only
            ("rebuild", noon + timedelta(days=1), True),  # the next: the evals key stays
        )
        for name, now, partitions in plan:
            if name == "rebuild":
                await set_window(store, key_subject(KEPT_KEY), 30)
            start, end, result = await timed_pass(store, now, partitions=partitions)
            await asyncio.sleep(0.5)  # the reads that started during it end
            # (the delete pass leaves its day's partitions empty: the next pass drops them)
            methods = {d["method"] for d in result["days"] if d["expired"]}
            if methods != {name}:
                raise SystemExit(f"{name}: the pass took {result['days']}")
            figures[name] = {
                "pass_s": round(end - start, 3),
                **result,
                "reads": reads.between(start, end),
            }
    finally:
        await store.close()
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench.retention", description=__doc__
    )
    parser.add_argument("--dsn", required=True, help="PostgreSQL URL of the database to use.")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--schema", default=DEFAULT_SCHEMA)
    parser.add_argument("--readers", type=int, default=DEFAULT_READERS)
    parser.add_argument("--baseline-s", type=float, default=DEFAULT_BASELINE_S)
    parser.add_argument("--target-s", type=float, default=DEFAULT_TARGET_S)
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", args.schema):
        raise SystemExit(f"--schema must be a plain lowercase identifier, got {args.schema!r}")
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{args.schema}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{args.schema}"')
    url = with_schema(args.dsn, args.schema)
    today = datetime.now(UTC).date()
    print(f"seeding {args.rows:,} rows into schema {args.schema}", file=sys.stderr)
    seeded_s = asyncio.run(seed(url, args.rows, today))
    print(f"seeded in {seeded_s:.0f} s", file=sys.stderr)
    ids, hours = asyncio.run(read_targets(url, today))
    reads = Reads()
    threads = [
        threading.Thread(target=reader, args=(url, ids, hours, reads, n), daemon=True)
        for n in range(args.readers)
    ]
    for t in threads:
        t.start()
    try:
        figures = asyncio.run(passes(url, today, reads, args.baseline_s))
    finally:
        reads.stop.set()
        for t in threads:
            t.join(30)
        with psycopg.connect(args.dsn, autocommit=True) as conn:  # each run seeds anew
            conn.execute(f'DROP SCHEMA IF EXISTS "{args.schema}" CASCADE')
    print(
        f"{'pass':<9}{'s':>8}{'inferences':>12}{'reads':>7}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}"
    )
    for name in ("drop", "rebuild", "delete"):
        f, r = figures[name], figures[name]["reads"]
        print(
            f"{name:<9}{f['pass_s']:>8.3f}{f['deleted']['inferences']:>12,}{r['count']:>7}"
            f"{r.get('p50_ms', 0):>8.1f}{r.get('p99_ms', 0):>8.1f}{r.get('max_ms', 0):>8.1f}"
        )
    b = figures["baseline_reads"]
    print(
        f"{'baseline':<9}{'':>8}{'':>12}{b['count']:>7}{b.get('p50_ms', 0):>8.1f}"
        f"{b.get('p99_ms', 0):>8.1f}{b.get('max_ms', 0):>8.1f}"
    )
    drop_s, delete_s = figures["drop"]["pass_s"], figures["delete"]["pass_s"]
    summary = {
        "rows": args.rows,
        "readers": args.readers,
        "seed_s": round(seeded_s, 1),
        **figures,
        "read_errors": len(reads.errors),
        "delete_over_drop": round(delete_s / drop_s, 1) if drop_s else None,
        "target_s": args.target_s,
        "drop_under_target": drop_s < args.target_s,
    }
    print(json.dumps(summary))
    return 0 if summary["drop_under_target"] and not reads.errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
