"""Fixtures shared by the gateway tests: a traffic store on SQLite and on PostgreSQL; the scripted
provider on loopback of the pass-through tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.fixtures.loopback_provider import Upstream
from tests.fixtures.postgres_fixture import pg_dsn


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'traffic.db'}"
    schema = request.getfixturevalue("pg_schema")
    with psycopg.connect(pg_dsn(schema), autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> "
                "'schema_migrations'",
                (schema,),
            )
        ]
        if tables:
            conn.execute(f"TRUNCATE {', '.join(tables)}")
    return pg_dsn(schema)


def store_gateway(sim_url: str, url: str, spool: Path, **overrides: object) -> GatewayThread:
    """A gateway recording into the store at ``url`` (not started)."""
    cfg = gateway_config(
        sim_url,
        store={
            "enabled": True,
            "url": url,
            "spool_dir": str(spool),
            "retry_initial_s": 0.1,
            "retry_max_s": 0.5,
        },
        **overrides,
    )
    return GatewayThread(cfg, use_store=True)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    """A provider on loopback answering fixed bytes (tests.fixtures.loopback_provider)."""
    up = Upstream().start()
    yield up
    up.stop()
