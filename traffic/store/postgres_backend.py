"""PostgreSQL backend: psycopg 3's async API, self-healing connections kept apart by lane.

Each lane (:data:`~traffic.store.sql_store.Lane`) has its own connections, so no lane waits on
another's statement, and a frozen connection holds only its own lane:

- ``request``: the reads a client request waits for (a key lookup by hash, the inference lookup
  of ``/v1/feedback``), on a small pool (``request_connections``; an idle one is taken when
  there is one) with a short ``request_timeout_s``;
- ``background``: the record writer's batched inserts and the budget flusher's ``add_spend``, on
  one connection, within ``operation_timeout_s``;
- ``default``: everything else (admin API, CLI, exports, summaries, versions, ``ping``), on one
  connection, within ``operation_timeout_s``; migrations (at :meth:`connect`) without a limit.

Each connection is opened lazily, in autocommit mode, and used by one operation at a time.

Timeouts: an operation, counting its wait for the connection, the connect and the statement,
must finish within its lane's limit, or the caller gets :class:`StoreUnavailable` at once; a
statement that started is abandoned with its connection (closed in the background once psycopg's
cancel request gives up): a server that accepts and never answers is treated as gone, so a key
lookup fails fast, the record writer spools instead of hanging, and the budget keeps the spend
pending.

Reconnection: when an operation fails because the connection is gone (server restarted, network
cut: ``OperationalError``/``InterfaceError``), the connection is discarded; if it had been open
before this operation (a stale one), the operation is retried once on a fresh connection, unless
it is marked ``retry=False`` (adding spend: it must not run twice). Otherwise the caller gets
:class:`StoreUnavailable` and the next operation connects again. Constraint violations become
:class:`StoreConflict`, other refusals :class:`StoreDataError`; the connection stays usable.

The schema is the connection's ``search_path`` (``?options=-csearch_path%3Dmyschema`` in the URL
chooses one); migrations run there at :meth:`connect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection

from traffic.store.config import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_OPERATION_TIMEOUT_S,
    DEFAULT_REQUEST_CONNECTIONS,
    DEFAULT_REQUEST_TIMEOUT_S,
)
from traffic.store.errors import StoreConflict, StoreDataError, StoreUnavailable
from traffic.store.migrations import migrate_postgres
from traffic.store.queries import Codec, Row, encode_rows_async, insert_sql, postgres_summary_sql
from traffic.store.schema import Table
from traffic.store.sql_store import Lane, SqlStore
from traffic.store.summary import sort_rows, summary_row

R = TypeVar("R")
Conn = AsyncConnection[tuple[Any, ...]]


class _Connection:
    """One lazily opened connection, reopened after the server goes away."""

    def __init__(self, dsn: str, connect_timeout_s: float, operation_timeout_s: float) -> None:
        self._dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._operation_timeout_s = operation_timeout_s
        self._conn: Conn | None = None
        self._lock = asyncio.Lock()
        self._closers: set[asyncio.Future[None]] = set()

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def _open(self, deadline: float | None) -> Conn:
        limit = self._connect_timeout_s
        if deadline is not None:
            limit = min(limit, deadline - asyncio.get_running_loop().time())
        try:
            async with asyncio.timeout(limit):
                return await AsyncConnection.connect(
                    self._dsn,
                    autocommit=True,
                    connect_timeout=max(2, math.ceil(self._connect_timeout_s)),
                )
        except (psycopg.OperationalError, TimeoutError, OSError) as e:
            raise StoreUnavailable(f"postgres: cannot connect: {e}") from e

    async def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            # Already broken: nothing more to release than the socket, which close() tried.
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

    async def run(
        self, op: Callable[[Conn], Awaitable[R]], *, retry: bool = True, bounded: bool = True
    ) -> R:
        """Run ``op`` on the connection; ``bounded``: waiting for the connection, connecting
        and ``op`` all within the operation timeout."""
        limit = self._operation_timeout_s if bounded else None
        deadline = None if limit is None else asyncio.get_running_loop().time() + limit
        try:
            async with asyncio.timeout_at(deadline):
                await self._lock.acquire()
        except TimeoutError as e:
            raise StoreUnavailable(f"postgres: connection busy for {limit}s") from e
        try:
            return await self._run_locked(op, retry, deadline)
        finally:
            self._lock.release()

    async def _run_locked(
        self, op: Callable[[Conn], Awaitable[R]], retry: bool, deadline: float | None
    ) -> R:
        for attempt in range(2):
            stale_possible = self._conn is not None and not self._conn.closed
            if not stale_possible:
                await self._discard()
                self._conn = await self._open(deadline)
            assert self._conn is not None
            try:
                return await self._bounded(self._conn, op, deadline)
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                await self._discard()
                if stale_possible and retry and attempt == 0:
                    continue
                raise StoreUnavailable(f"postgres: {e}") from e
            except psycopg.errors.UniqueViolation as e:
                raise StoreConflict(f"postgres: {e}") from e
            except psycopg.Error as e:
                raise StoreDataError(f"postgres: {e}") from e
        raise AssertionError("unreachable")

    async def _bounded(
        self, conn: Conn, op: Callable[[Conn], Awaitable[R]], deadline: float | None
    ) -> R:
        limit = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
        task = asyncio.ensure_future(op(conn))
        try:
            done, _ = await asyncio.wait({task}, timeout=limit)
        except asyncio.CancelledError:
            self._abandon(conn, task)
            raise
        if not done:
            # A server that accepts but never answers (network black hole, hung host).
            self._abandon(conn, task)
            raise StoreUnavailable(f"postgres: no answer within {self._operation_timeout_s}s")
        return task.result()

    def _abandon(self, conn: Conn, task: asyncio.Future[Any]) -> None:
        """Give up on a running operation and its connection without waiting.

        Cancelling psycopg mid-statement makes it ask the server to cancel (up to 10 s against
        a server that does not answer); that runs in the background, then the connection is
        closed, while the caller moves on at once.
        """
        if self._conn is conn:
            self._conn = None
        task.cancel()
        closer = asyncio.ensure_future(self._close_after(conn, task))
        self._closers.add(closer)
        closer.add_done_callback(self._closers.discard)

    @staticmethod
    async def _close_after(conn: Conn, task: asyncio.Future[Any]) -> None:
        await asyncio.wait({task})
        with contextlib.suppress(psycopg.Error, OSError):
            await conn.close()

    async def close(self) -> None:
        async with self._lock:
            await self._discard()
        if self._closers:  # abandoned operations: give them a moment to finish cancelling
            await asyncio.wait(set(self._closers), timeout=self._connect_timeout_s)


class _Pool:
    """A few connections for short operations: each takes an idle one, else the next in turn.

    Connections open on first use, so a second one exists only once two operations overlapped.
    """

    def __init__(
        self, size: int, dsn: str, connect_timeout_s: float, operation_timeout_s: float
    ) -> None:
        self._conns = [
            _Connection(dsn, connect_timeout_s, operation_timeout_s) for _ in range(size)
        ]
        self._turn = 0

    async def run(self, op: Callable[[Conn], Awaitable[R]], *, retry: bool = True) -> R:
        conn = next((c for c in self._conns if not c.busy), None)
        if conn is None:
            conn = self._conns[self._turn % len(self._conns)]
            self._turn += 1
        return await conn.run(op, retry=retry)

    async def close(self) -> None:
        for conn in self._conns:
            await conn.close()


class PostgresBackend(SqlStore):
    """Traffic store in a PostgreSQL database."""

    def __init__(
        self,
        dsn: str,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        operation_timeout_s: float = DEFAULT_OPERATION_TIMEOUT_S,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        request_connections: int = DEFAULT_REQUEST_CONNECTIONS,
        yield_every: int = 0,
    ) -> None:
        """``yield_every``: rows encoded between two yields of the CPU (the record writer
        process: :mod:`traffic.store.yielding`; the inserts themselves wait on the server's
        socket, where the kernel lets a waiting task in); 0, never."""
        if request_connections < 1:
            raise ValueError(f"request_connections must be >= 1, got {request_connections}")
        self.dsn = dsn
        self.codec = Codec("postgres")
        self._yield_every = yield_every
        self._requests = _Pool(request_connections, dsn, connect_timeout_s, request_timeout_s)
        self._background = _Connection(dsn, connect_timeout_s, operation_timeout_s)
        self._default = _Connection(dsn, connect_timeout_s, operation_timeout_s)

    async def connect(self) -> None:
        """Connect and apply pending migrations; :class:`StoreUnavailable` if unreachable."""
        # Migrations may build indexes on big tables: no operation timeout for them.
        await self._default.run(migrate_postgres, bounded=False)

    async def close(self) -> None:
        await self._requests.close()
        await self._background.close()
        await self._default.close()

    async def ping(self) -> None:
        await self._fetch("SELECT 1", [])

    async def _insert(self, table: Table, records: Sequence[object]) -> None:
        sql = insert_sql(table, self.codec)
        rows = await encode_rows_async(table, records, self.codec, self._yield_every)

        async def op(conn: Conn) -> None:
            async with conn.transaction(), conn.cursor() as cur:
                await cur.executemany(sql, rows)

        await self._background.run(op)

    async def _fetch(
        self,
        sql: str,
        params: Sequence[Any],
        *,
        write: bool = False,
        retry: bool = True,
        lane: Lane = "default",
    ) -> list[Row]:
        async def op(conn: Conn) -> list[Row]:
            cur = await conn.execute(sql, params)
            return await cur.fetchall() if cur.description is not None else []

        if lane == "request":
            return await self._requests.run(op, retry=retry)
        if lane == "background":
            return await self._background.run(op, retry=retry)
        return await self._default.run(op, retry=retry)

    async def _summarize(
        self, where: str, params: list[Any], group_by: list[str]
    ) -> list[dict[str, Any]]:
        rows = await self._fetch(postgres_summary_sql(where, group_by), params)
        n = len(group_by)
        out = []
        for row in rows:
            count, errors, cost, latency, ttft, accepted, rejected, edited = row[n:]
            if count == 0:
                continue  # no GROUP BY: the aggregate row of an empty selection
            out.append(
                summary_row(
                    dict(zip(group_by, row[:n], strict=True)),
                    count=count,
                    errors=errors,
                    cost_usd=cost,
                    latency=latency,
                    ttft=ttft,
                    accepted=accepted,
                    rejected=rejected,
                    edited=edited,
                )
            )
        return sort_rows(out, group_by)
