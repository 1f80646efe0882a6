"""PostgreSQL's day partitions at work: made ahead, listed, dropped, rebuilt without their
expired rows; the layout is :mod:`traffic.store.partition_sql`'s.

:class:`DayPartitions` works on a connection of its own (long statements never hold the
store's shared ones), in autocommit mode, one transaction per change of one day:

- :meth:`~DayPartitions.ensure`: a day's three partitions (``inference``, ``feedback``,
  ``shadow``) made where none of the tables has a partition over that day yet; a day whose
  rows the default partition already took is skipped (they expire by row deletes there);
- :meth:`~DayPartitions.drop`: the day's three partitions dropped: what a day past every one of
  its keys' windows costs, whatever its size (checked again under the lock: a row written since
  that is still within its window cancels it);
- :meth:`~DayPartitions.rebuild`: the rows to keep (``KeptRows``, by key) copied into
  new tables, then swapped in for the day's partitions (the old ones dropped). It costs a
  copy of the kept rows, so the retention pass takes it when they are fewer than the expired
  ones. The day's partitions are locked ``SHARE`` meanwhile: reads go on, a write to that day
  (a late feedback, a forget) waits for the copy, so none is lost or brought back.

Locks: dropping, creating or attaching a partition takes the parent table's exclusive lock,
which waits for the reads running on it, and new reads queue behind it. Each attempt waits at
most :data:`LOCK_TIMEOUT_S` for it, then the transaction is rolled back and tried again
(:data:`DDL_TRIES` times, :data:`DDL_PAUSE_S` apart): reads stall for a fraction of a second at
worst, and a long read (an export) delays the change instead of every read behind it.

:meth:`~DayPartitions.lock` takes the database's retention lock (a session advisory lock): one
pass at a time, whichever gateway or command line runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any, Final, TypeVar

import psycopg
from psycopg import AsyncConnection

from traffic.store.config import DEFAULT_CONNECT_TIMEOUT_S
from traffic.store.errors import StoreDataError, StoreUnavailable
from traffic.store.partition_sql import (
    PARTITIONED,
    KeptRows,
    create_day_sql,
    day_bounds,
    day_partition,
    parse_bound,
    partition_day,
)
from traffic.store.queries import select_list
from traffic.store.schema import INFERENCE, Table

R = TypeVar("R")
Conn = AsyncConnection[tuple[Any, ...]]

# Short: readers queue behind a waiting drop, so this is the longest stall one attempt causes.
LOCK_TIMEOUT_S: Final = 0.2
DDL_TRIES: Final = 25  # ~10 s of attempts before a change is left for the next pass
DDL_PAUSE_S: Final = 0.2
RETENTION_LOCK_KEY: Final = 0x5357_5944_5245_544E  # "SWYDRETN"


@dataclass(frozen=True, slots=True)
class Span:
    """A partition of ``table``: ids from ``lo`` to ``hi`` (None: unbounded); both None is the
    default partition."""

    table: str
    name: str
    lo: str | None
    hi: str | None
    default: bool = False

    @property
    def day(self) -> date | None:
        return partition_day(self.name)

    def overlaps(self, lo: str, hi: str) -> bool:
        if self.default:
            return False
        return (self.lo is None or self.lo < hi) and (self.hi is None or lo < self.hi)


def _by_name(name: str) -> Table:
    return next(t for t in PARTITIONED if t.name == name)


class DayPartitions:
    """The day partitions of one PostgreSQL database (module docstring)."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    @classmethod
    async def open(
        cls, dsn: str, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    ) -> DayPartitions:
        try:
            conn = await AsyncConnection.connect(
                dsn, autocommit=True, connect_timeout=max(2, round(connect_timeout_s))
            )
        except (psycopg.OperationalError, OSError) as e:
            raise StoreUnavailable(f"postgres: cannot connect: {e}") from e
        return cls(conn)

    async def close(self) -> None:
        await self._conn.close()

    async def _run(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            cur = await self._conn.execute(sql, list(params))
            return await cur.fetchall() if cur.description is not None else []
        except psycopg.OperationalError as e:
            raise StoreUnavailable(f"postgres: {e}") from e
        except psycopg.Error as e:
            raise StoreDataError(f"postgres: {e}") from e

    async def lock(self) -> bool:
        """Take the retention lock for this connection's life; False: another pass holds it."""
        rows = await self._run("SELECT pg_try_advisory_lock(%s)", [RETENTION_LOCK_KEY])
        return bool(rows[0][0])

    async def spans(self, table: str = INFERENCE.name) -> list[Span]:
        """``table``'s partitions, by name."""
        rows = await self._run(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass"
            " AND c.relkind IN ('r', 'p') ORDER BY c.relname",
            [table],
        )
        spans = []
        for name, expression in rows:
            bound = parse_bound(expression or "")
            lo, hi = bound if bound is not None else (None, None)
            spans.append(Span(table, str(name), lo, hi, default=bound is None))
        return spans

    async def days(self) -> set[date]:
        """The days that have their partitions in every table."""
        found = [{s.day for s in await self.spans(t.name)} for t in PARTITIONED]
        return {d for d in set.intersection(*found) if d is not None}

    async def _ddl(self, step: Callable[[Conn], Awaitable[R]]) -> R:
        """``step`` in a transaction whose locks wait :data:`LOCK_TIMEOUT_S` at most, tried
        again while they cannot be had."""
        for _ in range(DDL_TRIES):
            try:
                async with self._conn.transaction():
                    timeout_ms = round(LOCK_TIMEOUT_S * 1000)
                    await self._conn.execute(f"SET LOCAL lock_timeout = '{timeout_ms}ms'")
                    return await step(self._conn)
            except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
                await asyncio.sleep(DDL_PAUSE_S)
            except psycopg.OperationalError as e:
                raise StoreUnavailable(f"postgres: {e}") from e
            except psycopg.Error as e:
                raise StoreDataError(f"postgres: {e}") from e
        raise StoreUnavailable(f"postgres: tables stayed locked through {DDL_TRIES} tries")

    async def ensure(self, days: Iterable[date]) -> list[date]:
        """Make the partitions of ``days`` that no partition covers yet; the days made."""
        spans = {t.name: await self.spans(t.name) for t in PARTITIONED}
        made = []
        for day in sorted(set(days)):
            lo, hi = day_bounds(day)
            name = {t.name: day_partition(t.name, day) for t in PARTITIONED}
            over = {t: [s for s in spans[t] if s.overlaps(lo, hi)] for t in spans}
            if any(any(s.name != name[t] for s in found) for t, found in over.items()):
                continue  # the before partition holds that day
            missing = [_by_name(t) for t, found in over.items() if not found]
            if not missing:
                continue

            async def create(conn: Conn, missing: list[Table] = missing, day: date = day) -> None:
                for table in missing:
                    await conn.execute(create_day_sql(table, day))

            try:
                await self._ddl(create)
            except StoreDataError as e:
                if not isinstance(e.__cause__, psycopg.errors.CheckViolation):
                    raise
                continue  # the default partition took rows of that day: they stay there
            made.append(day)
        return made

    async def drop(self, day: date, kept: KeptRows) -> dict[str, int] | None:
        """Drop ``day``'s partitions; the feedback and shadow rows they held (the inferences
        are those the caller read: counting them would read the partition once more). None,
        dropping nothing, when a row ``kept`` keeps is there (written since the caller read)."""
        names = {t.name: day_partition(t.name, day) for t in PARTITIONED}
        where, params = kept.condition()

        async def step(conn: Conn) -> dict[str, int] | None:
            await conn.execute(f"LOCK TABLE {', '.join(names.values())} IN SHARE MODE")
            if not kept.nothing:
                sql = f"SELECT 1 FROM {names[INFERENCE.name]} WHERE {where} LIMIT 1"
                if await (await conn.execute(sql, params)).fetchone() is not None:
                    return None
            counts = {}
            for table in PARTITIONED:
                if table is not INFERENCE:
                    cur = await conn.execute(f"SELECT count(*) FROM {names[table.name]}")
                    row = await cur.fetchone()
                    counts[table.name] = int(row[0]) if row else 0
            await conn.execute(f"DROP TABLE {', '.join(names.values())}")
            return counts

        return await self._ddl(step)

    async def rebuild(self, day: date, kept: KeptRows) -> dict[str, int]:
        """Keep only ``kept``'s rows of ``day`` (with their feedback and shadow answers); the
        rows that went, by table."""
        lo, hi = day_bounds(day)
        where, params = kept.condition()
        names = {t.name: day_partition(t.name, day) for t in PARTITIONED}
        inference = names[INFERENCE.name]

        async def step(conn: Conn) -> dict[str, int]:
            await conn.execute(f"LOCK TABLE {', '.join(names.values())} IN SHARE MODE")
            gone = {}
            for table in PARTITIONED:
                old, new = names[table.name], f"{names[table.name]}_keep"
                cols = select_list(table)
                await conn.execute(f"CREATE TABLE {new} (LIKE {table.name} INCLUDING ALL)")
                if table is INFERENCE:
                    sql, args = f"SELECT {cols} FROM {old} WHERE {where}", params
                else:  # the answers on the inferences kept
                    sql = f"SELECT {cols} FROM {old} WHERE inference_id IN"
                    sql, args = f"{sql} (SELECT id FROM {inference}_keep)", []
                copied = await conn.execute(f"INSERT INTO {new} ({cols}) {sql}", args)
                cur = await conn.execute(f"SELECT count(*) FROM {old}")
                row = await cur.fetchone()
                gone[table.name] = (int(row[0]) if row else 0) - max(copied.rowcount, 0)
                column = table.partition_by
                await conn.execute(
                    f"ALTER TABLE {new} ADD CONSTRAINT {new}_bound"
                    f" CHECK ({column} >= '{lo}' AND {column} < '{hi}')"
                )
            await conn.execute(f"DROP TABLE {', '.join(names.values())}")
            for table in PARTITIONED:
                new = f"{names[table.name]}_keep"
                await conn.execute(
                    f"ALTER TABLE {table.name} ATTACH PARTITION {new}"
                    f" FOR VALUES FROM ('{lo}') TO ('{hi}')"
                )
                await conn.execute(f"ALTER TABLE {new} RENAME TO {names[table.name]}")
            return gone

        return await self._ddl(step)
