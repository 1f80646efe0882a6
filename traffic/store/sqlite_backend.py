"""SQLite backend: the embedded default (WAL mode, one writer thread, one reader thread).

sqlite3 calls block, so each connection lives on its own single-thread executor and the event
loop only awaits futures: the writer connection takes inserts, upserts and key updates (SQLite
has one writer at a time anyway), the reader connection takes queries, which WAL lets run beside
a write. ``:memory:`` uses one connection for both (two would see two databases).

Durability: ``synchronous=NORMAL`` in WAL mode: a committed transaction survives a process crash;
a power loss may lose the last transactions, not corrupt the file.

Errors: SQLITE_BUSY/LOCKED (past ``busy_timeout_s``), I/O, full, read-only, can't-open become
:class:`StoreUnavailable` (try again later); constraint violations :class:`StoreConflict`; other
errors :class:`StoreDataError`.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

from traffic.store.config import DEFAULT_SQLITE_BUSY_TIMEOUT_S
from traffic.store.errors import StoreConflict, StoreDataError, StoreError, StoreUnavailable
from traffic.store.migrations import migrate_sqlite
from traffic.store.queries import Codec, Row, encode_rows_async, insert_sql, sqlite_summary_sql
from traffic.store.schema import Table
from traffic.store.sql_store import Lane, SqlStore
from traffic.store.summary import SummaryAccumulator
from traffic.store.yielding import slices

R = TypeVar("R")

# Primary result codes (https://sqlite.org/rescode.html) that mean "not now" rather than "never".
_TRANSIENT_CODES: Final = frozenset({5, 6, 7, 8, 10, 13, 14, 15})  # BUSY LOCKED NOMEM READONLY
#                                                                   IOERR FULL CANTOPEN PROTOCOL
_FETCH_CHUNK: Final = 2000


def _translate(e: sqlite3.Error) -> StoreError:
    code = getattr(e, "sqlite_errorcode", None)
    if isinstance(e, sqlite3.IntegrityError):
        return StoreConflict(str(e))
    if code is not None and code & 0xFF in _TRANSIENT_CODES:
        return StoreUnavailable(f"sqlite: {e}")
    if code is None and isinstance(e, sqlite3.OperationalError):
        return StoreUnavailable(f"sqlite: {e}")
    return StoreDataError(f"sqlite: {e}")


class SqliteBackend(SqlStore):
    """Traffic store in one SQLite file."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = DEFAULT_SQLITE_BUSY_TIMEOUT_S,
        yield_every: int = 0,
    ) -> None:
        """``yield_every``: rows encoded and inserted between two yields of the CPU (the
        record writer process: :mod:`traffic.store.yielding`); 0, never."""
        self.path = str(path)
        self.codec = Codec("sqlite")
        self._yield_every = yield_every
        self._busy_timeout_s = busy_timeout_s
        self._writer: ThreadPoolExecutor | None = None
        self._reader: ThreadPoolExecutor | None = None
        self._wconn: sqlite3.Connection | None = None
        self._rconn: sqlite3.Connection | None = None

    @property
    def _memory(self) -> bool:
        return self.path == ":memory:"

    def _open(self) -> sqlite3.Connection:
        if not self._memory:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _open_writer(self) -> sqlite3.Connection:
        conn = self._open()
        migrate_sqlite(conn)
        return conn

    async def _on(self, executor: ThreadPoolExecutor | None, fn: Callable[[], R]) -> R:
        if executor is None:
            raise StoreError("SqliteBackend is not connected; await connect() first")

        def guarded() -> R:
            try:
                return fn()
            except sqlite3.Error as e:
                raise _translate(e) from e

        return await asyncio.get_running_loop().run_in_executor(executor, guarded)

    async def connect(self) -> None:
        """Open the connections and apply pending migrations."""
        if self._writer is not None:
            return
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="store-sqlite-writer")
        try:
            self._wconn = await self._on(self._writer, self._open_writer)
            if self._memory:
                self._reader, self._rconn = self._writer, self._wconn
            else:
                self._reader = ThreadPoolExecutor(1, thread_name_prefix="store-sqlite-reader")
                self._rconn = await self._on(self._reader, self._open)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        pairs = [(self._writer, self._wconn)]
        if self._reader is not self._writer:
            pairs.append((self._reader, self._rconn))
        for executor, conn in pairs:
            if executor is None:
                continue
            if conn is not None:
                await self._on(executor, conn.close)
            executor.shutdown(wait=False)  # idle: its last job has completed
        self._writer = self._reader = None
        self._wconn = self._rconn = None

    async def ping(self) -> None:
        """Succeed only if a write could start now: take the write lock and let it go."""

        def run() -> None:
            conn = self._conn(write=True)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")

        await self._on(self._writer, run)

    async def _insert(self, table: Table, records: Sequence[object]) -> None:
        sql = insert_sql(table, self.codec)
        # Encode here, on the event loop: pure-Python work in the writer thread would hold the
        # GIL against the request path for up to a switch interval (5 ms) at a time. The
        # thread then only runs sqlite3, which releases the GIL while it works.
        rows = await encode_rows_async(table, records, self.codec, self._yield_every)
        step = self._yield_every

        def run() -> None:
            conn = self._conn(write=True)
            conn.execute("BEGIN IMMEDIATE")
            try:
                # The B-tree work is all in user space: no preemption point in it.
                for part in slices(rows, step):
                    conn.executemany(sql, part)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        await self._on(self._writer, run)

    def _conn(self, *, write: bool) -> sqlite3.Connection:
        conn = self._wconn if write else self._rconn
        if conn is None:
            raise StoreError("SqliteBackend is not connected; await connect() first")
        return conn

    async def _fetch(
        self,
        sql: str,
        params: Sequence[Any],
        *,
        write: bool = False,
        retry: bool = True,
        lane: Lane = "default",
    ) -> list[Row]:
        # Lanes need nothing more here: reads run on the reader thread, beside any write.
        def run() -> list[Row]:
            return self._conn(write=write).execute(sql, tuple(params)).fetchall()

        return await self._on(self._writer if write else self._reader, run)

    async def _summarize(
        self, where: str, params: list[Any], group_by: list[str]
    ) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            acc = SummaryAccumulator(group_by)
            cursor = self._conn(write=False).execute(sqlite_summary_sql(where, group_by), params)
            for chunk in iter(partial(cursor.fetchmany, _FETCH_CHUNK), []):
                acc.add_rows(chunk)
            return acc.rows()

        return await self._on(self._reader, run)
