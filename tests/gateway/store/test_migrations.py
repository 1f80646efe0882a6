import asyncio
import dataclasses
import sqlite3

import psycopg
import pytest

from gateway.store import (
    ApiKeyRecord,
    FeedbackRecord,
    InferenceRecord,
    ModelVersionRecord,
    PolicyVersionRecord,
    ShadowRecord,
)
from gateway.store.migrations import (
    MIGRATIONS,
    Migration,
    check_migrations,
    migrate_postgres,
    migrate_sqlite,
)
from gateway.store.schema import (
    API_KEY,
    FEEDBACK,
    INFERENCE,
    MODEL_VERSION,
    POLICY_VERSION,
    SHADOW,
    Column,
    ColumnType,
    Table,
    ddl_for_version,
)

from .conftest import PG_URL, pg_dsn

RECORD_OF = {
    INFERENCE: InferenceRecord,
    FEEDBACK: FeedbackRecord,
    SHADOW: ShadowRecord,
    MODEL_VERSION: ModelVersionRecord,
    POLICY_VERSION: PolicyVersionRecord,
    API_KEY: ApiKeyRecord,
}


@pytest.mark.parametrize("table", list(RECORD_OF), ids=lambda t: t.name)
def test_tables_and_records_name_the_same_fields(table):
    fields = tuple(f.name for f in dataclasses.fields(RECORD_OF[table]))
    assert table.column_names == fields


def test_migration_list_is_consistent():
    check_migrations()
    with pytest.raises(ValueError):
        check_migrations((Migration(2, "b"), Migration(1, "a")))


def test_sqlite_migrate_twice_records_version_once(tmp_path):
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    assert migrate_sqlite(conn) == [m.version for m in MIGRATIONS]
    assert migrate_sqlite(conn) == []
    rows = conn.execute("SELECT version, description FROM schema_migrations").fetchall()
    assert rows == [(m.version, m.description) for m in MIGRATIONS]
    conn.close()


def test_a_later_migration_adds_columns_and_indexes(tmp_path):
    table_v2 = Table(
        "thing",
        (Column("id", ColumnType.ID, nullable=False), Column("note", ColumnType.TEXT, since=2)),
    )
    migrations = (Migration(1, "thing"), Migration(2, "thing.note"))
    assert ddl_for_version(2, "postgres", (table_v2,), ()) == [
        "ALTER TABLE thing ADD COLUMN note text"
    ]
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    assert migrate_sqlite(conn, migrations[:1], (table_v2,), ()) == [1]
    assert [r[1] for r in conn.execute("PRAGMA table_info(thing)")] == ["id"]
    assert migrate_sqlite(conn, migrations, (table_v2,), ()) == [2]
    assert [r[1] for r in conn.execute("PRAGMA table_info(thing)")] == ["id", "note"]
    conn.close()


@pytest.mark.postgres
async def test_postgres_concurrent_migrations_apply_once(pg_schema):
    schema = f"{pg_schema}_mig"
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as admin:
        await admin.execute(f"CREATE SCHEMA {schema}")
        try:
            conns = [
                await psycopg.AsyncConnection.connect(pg_dsn(schema), autocommit=True)
                for _ in range(3)
            ]
            results = await asyncio.gather(*(migrate_postgres(c) for c in conns))
            assert sorted(results) == [[], [], [m.version for m in MIGRATIONS]]
            assert await migrate_postgres(conns[0]) == []
            cur = await conns[0].execute("SELECT version FROM schema_migrations")
            assert [r[0] for r in await cur.fetchall()] == [m.version for m in MIGRATIONS]
            for c in conns:
                await c.close()
        finally:
            await admin.execute(f"DROP SCHEMA {schema} CASCADE")


async def test_backend_reports_schema_version(store_backend):
    assert await store_backend.schema_version() == MIGRATIONS[-1].version
    await store_backend.connect()  # idempotent: a second connect changes nothing
    assert await store_backend.schema_version() == MIGRATIONS[-1].version
