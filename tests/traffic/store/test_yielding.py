"""The record writer process's SQLite backend works in slices, giving the CPU back between them
(traffic.store.yielding): the rows and the transaction are the same as in one piece."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import traffic.store.sqlite_backend as sqlite_module
from traffic.store import InferenceRecord, StoreError
from traffic.store.sqlite_backend import SqliteBackend

from .scenario import inference


def _rows(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT * FROM inference ORDER BY id").fetchall()


async def _insert(backend: SqliteBackend, records: list[InferenceRecord]) -> None:
    await backend.connect()
    try:
        await backend.insert_inferences(records)
    finally:
        await backend.close()


async def test_a_backend_that_yields_stores_the_rows_one_that_does_not_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    yields: list[None] = []
    monkeypatch.setattr(sqlite_module, "yield_cpu", lambda: yields.append(None))
    records = [inference(response={"text": f"answer {i}"}) for i in range(10)]
    await _insert(SqliteBackend(tmp_path / "whole.db"), records)
    assert not yields  # the gateway's own writer never yields
    await _insert(SqliteBackend(tmp_path / "sliced.db", yield_every=3), records)
    assert len(yields) == 4  # slices of 3, 3, 3 and 1 rows
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
