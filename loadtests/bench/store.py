"""Write throughput of the traffic store, through the gateway's own path: the record writer.

    python -m loadtests.bench.store --records 20000 --backends sqlite,postgres --work-dir DIR

prints one JSON line, a figure per backend ({"sqlite": {...}, "postgres": {...}}); ``make
bench-gateway`` calls :func:`run` after its servers have stopped, so the writer has the machine.

For each backend: ``n`` realistic inference records (a short chat request and its 16-token
answer) are built first (not timed), then submitted in a burst to a started
:class:`~traffic.store.RecordWriter` over a fresh database, and ``close()`` waits until every
one is stored. Records/s = records the writer stored / (first submit .. close returned). The
queue is sized to hold the burst, so nothing takes the spool; a run that spooled anything says so.

SQLite writes a fresh file under the output folder; PostgreSQL writes into a schema of its own
(``bench_gateway_<pid>``), dropped afterwards, so the database's other users are untouched.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg

from traffic.store import InferenceRecord, RecordWriter, StoreConfig, StoreError, open_store

CLOSE_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class StoreFigure:
    backend: str
    records_per_s: float | None
    records: int
    written: int
    spooled: int
    seconds: float | None
    batch_size: int
    reason: str | None = None  # why records_per_s is None


def sample_records(n: int) -> list[InferenceRecord]:
    answer = "Batching turns many small commits into one, so the disk syncs once per batch."
    return [
        InferenceRecord(
            endpoint="chat.completions",
            wire_format="openai.chat",
            request={
                "model": "sim-local",
                "messages": [{"role": "user", "content": f"Question {i}: why batch writes?"}],
                "max_tokens": 16,
            },
            response={
                "id": f"chatcmpl-{i}",
                "object": "chat.completion",
                "model": "sim-local",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 12, "completion_tokens": 16, "total_tokens": 28},
            },
            route_target="local",
            served_model="sim-local",
            replica="http://127.0.0.1:8000",
            policy_version="v1",
            policy_reason="alias",
            status=200,
            latency_ms=1.5,
            prompt_tokens=12,
            completion_tokens=16,
            tags={"bench": "store"},
            attempts=[{"target": "local", "status": 200, "latency_ms": 1.4}],
        )
        for i in range(n)
    ]


async def measure_writer(url: str, records: list[InferenceRecord], spool_dir: Path) -> StoreFigure:
    config = StoreConfig(url=url, spool_dir=spool_dir, queue_size=len(records) + 1)
    backend = open_store(config)
    await backend.connect()
    try:
        writer = RecordWriter(backend, config)
        await writer.start()
        started = time.perf_counter()
        for record in records:
            writer.submit(record)
        await writer.close(CLOSE_TIMEOUT_S)
        seconds = time.perf_counter() - started
    finally:
        await backend.close()
    stats = writer.stats()
    reason = None
    if stats.spooled_total or stats.written_total != len(records):
        reason = (
            f"only {stats.written_total}/{len(records)} stored directly "
            f"({stats.spooled_total} spooled; last error: {stats.last_error})"
        )
    return StoreFigure(
        backend=config.dialect,
        records_per_s=stats.written_total / seconds if seconds > 0 else None,
        records=len(records),
        written=stats.written_total,
        spooled=stats.spooled_total,
        seconds=seconds,
        batch_size=config.batch_size,
        reason=reason,
    )


def with_schema(url: str, schema: str) -> str:
    """``url`` whose connections look in ``schema`` first (PostgreSQL's ``search_path``)."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


async def _postgres(url: str, records: list[InferenceRecord], spool_dir: Path) -> StoreFigure:
    schema = f"bench_gateway_{os.getpid()}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=5) as c:
        await c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await c.execute(f'CREATE SCHEMA "{schema}"')
        try:
            return await measure_writer(with_schema(url, schema), records, spool_dir)
        finally:
            await c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _remove_sqlite_files(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _failed(backend: str, n: int, exc: BaseException) -> StoreFigure:
    return StoreFigure(backend, None, n, 0, 0, None, 0, reason=f"{type(exc).__name__}: {exc}")


def run(
    backends: tuple[str, ...], n: int, postgres_url: str, work_dir: Path
) -> dict[str, StoreFigure]:
    """records/s per backend; a backend that cannot run gets ``records_per_s=None`` and why."""
    work_dir.mkdir(parents=True, exist_ok=True)
    figures: dict[str, StoreFigure] = {}
    for name in backends:
        records = sample_records(n)
        spool = work_dir / f"spool-{name}"
        db = work_dir / "store-throughput.db"
        shutil.rmtree(spool, ignore_errors=True)
        _remove_sqlite_files(db)
        try:
            if name == "sqlite":
                url = f"sqlite:///{db.resolve()}"
                figures[name] = asyncio.run(measure_writer(url, records, spool))
            elif name == "postgres":
                figures[name] = asyncio.run(_postgres(postgres_url, records, spool))
            else:
                raise ValueError(f"unknown store backend {name!r}")
        except (StoreError, psycopg.Error, OSError, ValueError) as exc:
            # A figure that cannot be measured says why; the rest of the run goes on.
            figures[name] = _failed(name, n, exc)
        finally:
            shutil.rmtree(spool, ignore_errors=True)
            _remove_sqlite_files(db)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.store")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--work-dir", type=Path, default=Path(".cache/bench/store"))
    args = parser.parse_args(argv)
    figures = run(tuple(args.backends.split(",")), args.records, args.postgres_url, args.work_dir)
    print(json.dumps({name: asdict(fig) for name, fig in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
