"""Fixtures: ``store_backend`` runs each test on SQLite (a fresh file) and on PostgreSQL.

PostgreSQL cases carry ``@pytest.mark.postgres`` and use the session's schema
(``tests.fixtures.postgres_fixture``), emptied before each test; they skip, saying why, when no
server answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fixtures.postgres_fixture import pg_dsn
from traffic.store import StoreBackend, StoreConfig, open_store


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
