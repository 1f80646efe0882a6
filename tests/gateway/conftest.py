"""Fixtures shared by the gateway tests: a traffic store on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.gateway.store.conftest import PG_URL, pg_dsn


@pytest.fixture(scope="session")
def pg_schema() -> Iterator[str]:
    """One schema in database ``test`` for the session's PostgreSQL cases, dropped at the end;
    skips (saying why) when no server answers."""
    try:
        with psycopg.connect(PG_URL, connect_timeout=3, autocommit=True) as conn:
            name = f"store_test_{uuid.uuid4().hex[:12]}"
            conn.execute(f"CREATE SCHEMA {name}")
    except psycopg.OperationalError as e:
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}: {e}".splitlines()[0])
    yield name
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


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
