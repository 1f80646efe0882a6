"""PostgreSQL's day partitions: migration 12 turns an existing database's tables into partitioned
ones without a copy and every row reads back as it was; new days get partitions of their own;
a day the default partition took stays there and still expires by row deletes."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.fixtures.postgres_fixture import PG_URL, pg_dsn
from traffic.retention import id_day, retention_pass
from traffic.store import (
    FeedbackRecord,
    InferenceRow,
    ShadowRecord,
    StoreBackend,
    StoreConfig,
    open_store,
)
from traffic.store.migrations import MIGRATIONS, migrate_postgres, migrate_sqlite
from traffic.store.partition_sql import KeptRows, day_bounds, parse_bound
from traffic.store.partitions import DayPartitions
from traffic.store.queries import Codec, encode_rows, insert_sql
from traffic.store.schema import FEEDBACK, INFERENCE, SHADOW, Table

from .scenario import inference

V11 = tuple(m for m in MIGRATIONS if m.version <= 11)


def _rows(days: list[int]) -> list[InferenceRow]:
    rows = []
    for d in days:
        record = inference(datetime(2025, 3, d, 9, tzinfo=UTC), api_key_id=f"key-{d}")
        feedback = FeedbackRecord(inference_id=record.id, kind="accepted", ts=record.ts)
        shadow = ShadowRecord(inference_id=record.id, target="local", response={"t": d})
        rows.append(InferenceRow(record, [feedback], [shadow]))
    return rows


def _as_of_11(table: Table) -> Table:
    return dataclasses.replace(table, columns=tuple(c for c in table.columns if c.since <= 11))


async def _v11_postgres(url: str, rows: list[InferenceRow]) -> None:
    """A database as release 11 left it, holding ``rows``."""
    codec = Codec("postgres")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pg:
        assert await migrate_postgres(pg, V11) == list(range(1, 12))
        for table, records in (
            (INFERENCE, [r.inference for r in rows]),
            (FEEDBACK, [f for r in rows for f in r.feedback]),
            (SHADOW, [s for r in rows for s in r.shadows]),
        ):
            old = _as_of_11(table)
            async with pg.cursor() as cur:
                sql = insert_sql(old, codec, on_conflict_ignore=False)
                await cur.executemany(sql, encode_rows(old, records, codec))


@pytest.fixture
async def schema(pg_schema: str) -> AsyncIterator[str]:
    """A schema of its own (dropped after), empty."""
    name = f"{pg_schema}_part"
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as admin:
        await admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        await admin.execute(f"CREATE SCHEMA {name}")
        yield name
        await admin.execute(f"DROP SCHEMA {name} CASCADE")


async def _partitions(url: str, table: str) -> dict[str, str]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pg:
        cur = await pg.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass"
            " AND c.relkind = 'r'",
            [table],
        )
        return {str(name): str(bound) for name, bound in await cur.fetchall()}


async def _read(store: StoreBackend) -> list[InferenceRow]:
    return [r async for r in store.iter_inferences(with_shadows=True)]


@pytest.mark.postgres
async def test_migration_12_partitions_an_existing_database_and_every_row_reads_back(
    schema: str,
) -> None:
    url = pg_dsn(schema)
    old = _rows([1, 2, 3])
    await _v11_postgres(url, old)
    store = open_store(StoreConfig(url=url))
    await store.connect()  # migrates 11 -> 12
    try:
        assert await store.schema_version() == MIGRATIONS[-1].version
        assert await _read(store) == old
        # The old tables are each one partition, up to the midnight after the migration's day.
        for table in ("inference", "feedback", "shadow"):
            bounds = await _partitions(url, table)
            assert set(bounds) == {f"{table}_before", f"{table}_default"}
            lo, hi = parse_bound(bounds[f"{table}_before"]) or (None, None)
            assert lo is None and hi is not None and id_day(hi) > datetime.now(UTC).date()
        # Written after it: replays stay idempotent on the wider keys.
        new = _rows([4])
        for _ in range(2):
            await store.insert_inferences([r.inference for r in new])
            await store.insert_feedback(new[0].feedback)
            await store.insert_shadows(new[0].shadows)
        assert await _read(store) == old + new
        # The rows it held expire by row deletes.
        report = await retention_pass(store, 1, now=datetime(2025, 3, 4, tzinfo=UTC))
        assert [(d.day.day, d.method) for d in report.days] == [(1, "delete"), (2, "delete")]
        assert [r.inference.id for r in await _read(store)] == [
            r.inference.id for r in old[2:] + new
        ]
        assert "inference_before" in await _partitions(url, "inference")
    finally:
        await store.close()


@pytest.mark.postgres
async def test_a_new_database_is_partitioned_from_the_start_and_days_get_their_own(
    schema: str,
) -> None:
    url = pg_dsn(schema)
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        assert set(await _partitions(url, "inference")) == {"inference_default"}
        parts = await DayPartitions.open(url)
        try:
            assert await parts.ensure([date(2025, 3, 1), date(2025, 3, 2)]) == [
                date(2025, 3, 1),
                date(2025, 3, 2),
            ]
            assert await parts.ensure([date(2025, 3, 2)]) == []  # there already
            # A day whose rows the default partition took: left there.
            late = _rows([7])
            await store.insert_inferences([late[0].inference])
            assert await parts.ensure([date(2025, 3, 7)]) == []
            assert await parts.days() == {date(2025, 3, 1), date(2025, 3, 2)}
        finally:
            await parts.close()
        rows = _rows([1, 2])
        await store.insert_inferences([r.inference for r in rows])
        bounds = await _partitions(url, "inference")
        assert parse_bound(bounds["inference_d20250301"]) == day_bounds(date(2025, 3, 1))
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pg:
            cur = await pg.execute("SELECT tableoid::regclass::text, id FROM inference ORDER BY id")
            where = {str(i): str(t) for t, i in await cur.fetchall()}
        assert where[rows[0].inference.id] == "inference_d20250301"
        assert where[late[0].inference.id] == "inference_default"
        # Expiry reaches the default partition's rows too.
        report = await retention_pass(store, 1, now=datetime(2025, 3, 10, tzinfo=UTC))
        assert {(d.day.day, d.method) for d in report.days} == {
            (1, "drop"),
            (2, "drop"),
            (7, "delete"),
        }
        assert await _read(store) == []
    finally:
        await store.close()


def test_migration_12_on_sqlite_adds_the_windows_table_and_leaves_the_rows(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "v11.db", isolation_level=None)
    assert migrate_sqlite(conn, V11) == list(range(1, 12))
    codec = Codec("sqlite")
    record = _rows([1])[0].inference
    conn.execute(insert_sql(INFERENCE, codec), encode_rows(INFERENCE, [record], codec)[0])
    assert migrate_sqlite(conn) == [12]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "retention_window" in tables
    assert conn.execute("SELECT count(*) FROM inference").fetchone() == (1,)
    conn.close()


def test_a_days_bounds_are_its_midnights_ids() -> None:
    day = date(2025, 3, 1)
    lo, hi = day_bounds(day)
    assert (id_day(lo), id_day(hi)) == (day, day + timedelta(days=1))
    assert lo.endswith("-0000-0000-000000000000")
    assert parse_bound(f"FOR VALUES FROM ('{lo}') TO ('{hi}')") == (lo, hi)
    assert parse_bound(f"FOR VALUES FROM (MINVALUE) TO ('{hi}')") == (None, hi)
    assert parse_bound("DEFAULT") is None


@pytest.mark.postgres
async def test_a_drop_gives_way_to_a_row_to_keep_and_one_pass_runs_at_a_time(
    schema: str,
) -> None:
    url = pg_dsn(schema)
    store = open_store(StoreConfig(url=url))
    await store.connect()
    parts = await DayPartitions.open(url)
    try:
        day = date(2025, 3, 1)
        await parts.ensure([day])
        await store.insert_inferences([r.inference for r in _rows([1])])  # key-1's
        keeps = KeptRows(keys=("key-1",), default=False, known=("key-1",))
        assert await parts.drop(day, keeps) is None
        assert await parts.days() == {day}
        # Another pass holds the database's retention lock: this one changes nothing.
        assert await parts.lock()
        report = await retention_pass(store, 1, now=datetime(2025, 3, 10, tzinfo=UTC))
        assert report.busy and report.days == []
        assert len(await _read(store)) == 1
    finally:
        await parts.close()
        await store.close()
