"""The record writer process's backends work in slices, giving the CPU back between them
(traffic.store.yielding): the rows and the transaction are the same as in one piece."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import traffic.store.yielding as yielding
from tests.fixtures.postgres_fixture import pg_dsn
from traffic.store import InferenceRecord, StoreBackend, StoreError
from traffic.store.postgres_backend import PostgresBackend
from traffic.store.sqlite_backend import SqliteBackend

from .scenario import inference


@pytest.fixture
def yields(monkeypatch: pytest.MonkeyPatch) -> list[None]:
    """Each yield of the CPU, counted (and not made)."""
    seen: list[None] = []
    monkeypatch.setattr(yielding, "yield_cpu", lambda: seen.append(None))
    return seen


def _rows(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT * FROM inference ORDER BY id").fetchall()


async def _insert(backend: StoreBackend, records: list[InferenceRecord]) -> None:
    await backend.connect()
    try:
        await backend.insert_inferences(records)
    finally:
        await backend.close()


def test_slices_cover_every_item_once_and_yield_after_each(yields: list[None]) -> None:
    assert [list(s) for s in yielding.slices(range(7), 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(yields) == 3
    assert [list(s) for s in yielding.slices(range(7), 0)] == [list(range(7))]
    assert list(yielding.slices([], 3)) == []
    assert len(yields) == 3  # no slices, no yields


async def test_a_backend_that_yields_stores_the_rows_one_that_does_not_stores(
    tmp_path: Path, yields: list[None]
) -> None:
    records = [inference(response={"text": f"answer {i}"}) for i in range(10)]
    await _insert(SqliteBackend(tmp_path / "whole.db"), records)
    assert not yields  # the gateway's own writer never yields
    await _insert(SqliteBackend(tmp_path / "sliced.db", yield_every=3), records)
    assert len(yields) == 8  # slices of 3, 3, 3 and 1 rows: encoded, then inserted
    assert _rows(tmp_path / "sliced.db") == _rows(tmp_path / "whole.db")
    assert len(_rows(tmp_path / "sliced.db")) == 10


async def test_a_row_refused_in_a_later_slice_stores_none_of_the_batch(tmp_path: Path) -> None:
    """One transaction whatever the slices: a NOT NULL refused in the third slice leaves the
    first two unwritten too (the writer then dead-letters or retries the batch as a whole)."""
    records = [inference() for _ in range(10)]
    records[7] = inference(route_target=None)
    with pytest.raises(StoreError):
        await _insert(SqliteBackend(tmp_path / "t.db", yield_every=3), records)
    assert _rows(tmp_path / "t.db") == []


@pytest.mark.postgres
async def test_postgres_encodes_in_slices_and_stores_every_row(
    pg_empty_schema: str, yields: list[None]
) -> None:
    records = [inference(response={"text": f"answer {i}"}) for i in range(10)]
    backend = PostgresBackend(pg_dsn(pg_empty_schema), yield_every=3)
    await backend.connect()
    try:
        await backend.insert_inferences(records)
        stored = [row.inference async for row in backend.iter_inferences()]
    finally:
        await backend.close()
    assert len(yields) == 4  # encoded in slices of 3, 3, 3 and 1; the insert waits on a socket
    assert sorted((r.id, r.response) for r in stored) == sorted((r.id, r.response) for r in records)
