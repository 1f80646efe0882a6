import asyncio
import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fixtures.postgres_fixture import PG_URL, pg_dsn
from traffic.store import (
    ApiKeyRecord,
    DatasetRecord,
    FeedbackRecord,
    InferenceRecord,
    ModelDatasetRecord,
    ModelVersionRecord,
    PolicyVersionRecord,
    ShadowRecord,
    StoreConfig,
    TeamRecord,
    open_store,
)
from traffic.store.migrations import (
    MIGRATIONS,
    Migration,
    check_migrations,
    migrate_postgres,
    migrate_sqlite,
)
from traffic.store.queries import Codec, encode_rows, insert_sql
from traffic.store.schema import (
    API_KEY,
    DATASET,
    FEEDBACK,
    INFERENCE,
    MODEL_DATASET,
    MODEL_VERSION,
    POLICY_VERSION,
    SHADOW,
    TEAM,
    Column,
    ColumnType,
    Table,
    ddl_for_version,
)

from .scenario import inference

RECORD_OF = {
    INFERENCE: InferenceRecord,
    FEEDBACK: FeedbackRecord,
    SHADOW: ShadowRecord,
    MODEL_VERSION: ModelVersionRecord,
    POLICY_VERSION: PolicyVersionRecord,
    API_KEY: ApiKeyRecord,
    TEAM: TeamRecord,
    DATASET: DatasetRecord,
    MODEL_DATASET: ModelDatasetRecord,
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


def _as_of(version: int, table: Table = INFERENCE) -> Table:
    """``table`` as migration ``version`` left it."""
    return dataclasses.replace(table, columns=tuple(c for c in table.columns if c.since <= version))


async def _old_database(
    url: str, schema: str | None, version: int, record: InferenceRecord
) -> None:
    """A database migrated to ``version`` only, holding ``record`` (written by that version's
    code: the columns it knew)."""
    old = _as_of(version)
    migrations = tuple(m for m in MIGRATIONS if m.version <= version)
    applied = [m.version for m in migrations]
    if schema is None:
        codec = Codec("sqlite")
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        assert migrate_sqlite(conn, migrations) == applied
        conn.execute(insert_sql(old, codec), encode_rows(old, [record], codec)[0])
        conn.close()
        return
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pg:
        assert await migrate_postgres(pg, migrations) == applied
        codec = Codec("postgres")
        await pg.execute(insert_sql(old, codec), encode_rows(old, [record], codec)[0])


async def _migrated_rows(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    dialect: str,
    version: int,
    old_row: InferenceRecord,
    new_row: InferenceRecord,
) -> dict[str, InferenceRecord]:
    """``old_row`` in a database at ``version``, opened by this code (which migrates it to the
    latest) and given ``new_row``; both read back by id."""
    schema = None
    url = f"sqlite:///{tmp_path / f'v{version}.db'}"
    if dialect == "postgres":
        schema = f"{request.getfixturevalue('pg_schema')}_v{version}"
        url = pg_dsn(schema)
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
    try:
        await _old_database(url, schema, version, old_row)
        backend = open_store(StoreConfig(url=url))
        await backend.connect()  # migrates version -> latest
        try:
            assert await backend.schema_version() == MIGRATIONS[-1].version
            await backend.insert_inferences([new_row])
            return {r.inference.id: r.inference async for r in backend.iter_inferences()}
        finally:
            await backend.close()
    finally:
        if schema is not None:
            with psycopg.connect(PG_URL, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")


DIALECTS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_migration_2_adds_cache_writes_and_old_rows_read_none(request, tmp_path, dialect):
    old_row = inference(prompt_tokens=2000, cached_tokens=1024, cost_usd=0.01)
    new_row = inference(prompt_tokens=3000, cached_tokens=1024, cache_creation_tokens=900)
    rows = await _migrated_rows(request, tmp_path, dialect, 1, old_row, new_row)
    assert rows[old_row.id] == old_row  # cache_creation_tokens None: not recorded, not zero
    assert rows[old_row.id].cache_creation_tokens is None
    assert rows[new_row.id] == new_row
    assert rows[new_row.id].cache_creation_tokens == 900


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_migration_3_adds_the_canonical_exchange_and_old_rows_read_none(
    request, tmp_path, dialect
):
    messages_body = {
        "model": "claude",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    message = {"type": "message", "content": [{"type": "text", "text": "hello"}]}
    translated = {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    completion = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}
    fields: dict[str, Any] = {
        "endpoint": "messages",
        "wire_format": "anthropic.messages",
        "request": messages_body,
        "response": message,
    }
    old_row = inference(**fields, cache_creation_tokens=5)
    new_row = inference(**fields, canonical_request=translated, canonical_response=completion)
    rows = await _migrated_rows(request, tmp_path, dialect, 2, old_row, new_row)
    assert rows[old_row.id] == old_row
    assert rows[old_row.id].canonical_request is None  # the exporter translates it again
    assert rows[old_row.id].canonical_response is None
    assert rows[new_row.id] == new_row
    assert rows[new_row.id].canonical_request == translated
    assert rows[new_row.id].canonical_response == completion


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_migration_5_indexes_only_the_rows_with_a_key_or_an_episode(
    request, tmp_path, dialect
):
    old_row = inference(episode_id="ep-old", api_key_id="key-1")
    new_row = inference()  # neither: no entry in either index
    rows = await _migrated_rows(request, tmp_path, dialect, 4, old_row, new_row)
    assert rows[old_row.id] == old_row and rows[new_row.id] == new_row
    if dialect == "sqlite":
        conn = sqlite3.connect(tmp_path / "v4.db")
        defs = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM inference WHERE episode_id = ? ORDER BY id",
            ["ep-old"],
        ).fetchall()
        assert conn.execute(
            "SELECT id FROM inference WHERE episode_id = ?", ["ep-old"]
        ).fetchall() == [(old_row.id,)]
        conn.close()
        assert "inference_episode_id_set" in " ".join(str(step[-1]) for step in plan)
        for column in ("api_key_id", "episode_id"):
            assert f"inference_{column}_id" not in defs  # the full index is gone
            assert defs[f"inference_{column}_set"].endswith(f"WHERE {column} IS NOT NULL")


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_migration_6_types_the_decision_and_old_rows_read_none(request, tmp_path, dialect):
    old_row = inference(
        policy_version="v1+s1", policy_reason="learned:explore p_local=0.210 threshold=0.640"
    )
    new_row = inference(
        policy_version="v1+s1",
        policy_reason="learned:explore p_local=0.210 threshold=0.640",
        decision_kind="learned_explore",
        decision_target="local",
        decision_p_local=0.2103,
        decision_threshold=0.6417,
        decision_propensity=0.05,
        decision_state_version="s1",
        release_id="v2",
        release_arm="live",
        release_p=0.7,
        shadow_p=0.0,
        shadow_skipped=False,
    )
    rows = await _migrated_rows(request, tmp_path, dialect, 5, old_row, new_row)
    assert rows[old_row.id] == old_row  # every decision column None: not known, not zero
    assert rows[old_row.id].decision_propensity is None
    assert rows[new_row.id] == new_row  # full precision, not the reason's three digits
    assert rows[new_row.id].decision_p_local == 0.2103
    assert rows[new_row.id].shadow_skipped is False


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_migration_7_keeps_the_other_arms_target_and_old_rows_read_none(
    request, tmp_path, dialect
):
    old_row = inference(release_id="v2", release_arm="live", release_p=0.7)
    new_row = inference(
        release_id="v2", release_arm="live", release_p=0.7, release_other_target="local"
    )
    rows = await _migrated_rows(request, tmp_path, dialect, 6, old_row, new_row)
    assert rows[old_row.id] == old_row and rows[old_row.id].release_other_target is None
    assert rows[new_row.id] == new_row


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_migration_9_stamps_consent_and_old_rows_read_none(request, tmp_path, dialect):
    old_row = inference(api_key_id="key-1")
    new_row = inference(api_key_id="key-1", training_use="redact")
    rows = await _migrated_rows(request, tmp_path, dialect, 8, old_row, new_row)
    assert rows[old_row.id] == old_row and rows[old_row.id].training_use is None
    assert rows[new_row.id] == new_row and rows[new_row.id].training_use == "redact"


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_migration_9_gives_old_keys_no_team_and_no_consent_of_their_own(
    request, tmp_path, dialect
):
    old_key = ApiKeyRecord(name="before", key_hash="h" * 64, prefix="sy-abc")
    old_api_key = _as_of(8, API_KEY)
    schema = None
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    migrations = tuple(m for m in MIGRATIONS if m.version <= 8)
    if dialect == "postgres":
        schema = f"{request.getfixturevalue('pg_schema')}_keys"
        url = pg_dsn(schema)
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        codec = Codec("postgres")
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as apg:
            await migrate_postgres(apg, migrations)
            row = encode_rows(old_api_key, [old_key], codec)[0]
            await apg.execute(insert_sql(old_api_key, codec), row)
    else:
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        migrate_sqlite(conn, migrations)
        codec = Codec("sqlite")
        conn.execute(insert_sql(old_api_key, codec), encode_rows(old_api_key, [old_key], codec)[0])
        conn.close()
    try:
        backend = open_store(StoreConfig(url=url))
        await backend.connect()  # migrates 8 -> latest
        try:
            assert await backend.get_api_key(old_key.id) == old_key  # no team, its team's use
            assert await backend.set_api_key_consent(old_key.id, team_id="ide", training_use="deny")
            after = await backend.get_api_key(old_key.id)
            assert after is not None and (after.team_id, after.training_use) == ("ide", "deny")
            assert await backend.get_team("ide") is None  # a team has a row once it has a setting
        finally:
            await backend.close()
    finally:
        if schema is not None:
            with psycopg.connect(PG_URL, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_migration_10_links_datasets_to_a_checkpoint_recorded_before_it(
    request, tmp_path, dialect
):
    checkpoint = ModelVersionRecord(id="sft-0001", path="/ck/sft-0001", status="promoted")
    dataset = DatasetRecord(
        id="d" * 64,
        kind="sft",
        row_count=1,
        first_id="0190a000-0000-7000-8000-000000000001",
        last_id="0190a000-0000-7000-8000-000000000001",
        lineage={"kind": "sft"},
        config={"kind": "sft", "split": {"eval_fraction": 0.1}},
    )
    schema = None
    url = f"sqlite:///{tmp_path / 'v9.db'}"
    migrations = tuple(m for m in MIGRATIONS if m.version <= 9)
    if dialect == "postgres":
        schema = f"{request.getfixturevalue('pg_schema')}_lineage"
        url = pg_dsn(schema)
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        codec = Codec("postgres")
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as apg:
            assert await migrate_postgres(apg, migrations) == list(range(1, 10))
            row = encode_rows(MODEL_VERSION, [checkpoint], codec)[0]
            await apg.execute(insert_sql(MODEL_VERSION, codec), row)
    else:
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        assert migrate_sqlite(conn, migrations) == list(range(1, 10))
        codec = Codec("sqlite")
        conn.execute(
            insert_sql(MODEL_VERSION, codec), encode_rows(MODEL_VERSION, [checkpoint], codec)[0]
        )
        conn.close()
    try:
        backend = open_store(StoreConfig(url=url))
        await backend.connect()  # migrates 9 -> latest
        try:
            assert await backend.schema_version() == MIGRATIONS[-1].version
            assert await backend.datasets_of([checkpoint.id]) == []  # trained before lineage
            link = ModelDatasetRecord(model_version_id=checkpoint.id, dataset_id=dataset.id)
            await backend.link_datasets([dataset], [link])
            assert await backend.datasets_of([checkpoint.id]) == [(link, dataset)]
            assert await backend.list_model_versions() == [checkpoint]
        finally:
            await backend.close()
    finally:
        if schema is not None:
            with psycopg.connect(PG_URL, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")
