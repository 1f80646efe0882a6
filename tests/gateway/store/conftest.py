"""Fixtures: ``store_backend`` runs each test on SQLite (a fresh file) and on PostgreSQL.

PostgreSQL cases carry ``@pytest.mark.postgres`` and use one schema created for the test session
in database ``test`` (dropped at the end), emptied before each test. They skip, saying why, when
no server answers at 127.0.0.1:5432 (``SWITCHYARD_TEST_PG`` overrides the URL).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from gateway.store import StoreBackend, StoreConfig, open_store
from gateway.store.schema import TABLES

PG_URL = os.environ.get("SWITCHYARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def pg_dsn(schema: str, url: str = PG_URL) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_empty_schema(pg_schema: str) -> str:
    """The session schema, emptied for this test."""
    # The first test of the session finds no tables yet: connect() migrates.
    with (
        psycopg.connect(pg_dsn(pg_schema), autocommit=True) as conn,
        contextlib.suppress(psycopg.errors.UndefinedTable),
    ):
        conn.execute(f"TRUNCATE {', '.join(t.name for t in TABLES)}")
    return pg_schema


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return pg_dsn(request.getfixturevalue("pg_empty_schema"))


@pytest.fixture
def writer_config(tmp_path: Path) -> StoreConfig:
    """Quick batching and back-off, a spool in ``tmp_path``; tests set ``url``."""
    return StoreConfig(
        spool_dir=tmp_path / "spool",
        batch_size=500,
        flush_interval_s=0.01,
        queue_size=1000,
        retry_initial_s=0.05,
        retry_max_s=0.2,
        connect_timeout_s=2,
        sqlite_busy_timeout_s=0.05,
    )


@pytest.fixture
def store_config(store_url: str, writer_config: StoreConfig) -> StoreConfig:
    return writer_config.model_copy(update={"url": store_url})


@pytest.fixture
async def store_backend(store_config: StoreConfig) -> AsyncIterator[StoreBackend]:
    backend = open_store(store_config)
    await backend.connect()
    yield backend
    await backend.close()
