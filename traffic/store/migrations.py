"""Versioned migrations of the traffic store, applied at connect time.

A migration is ``(version, description, extra SQL per dialect)``; its DDL comes from
:mod:`traffic.store.schema` (the tables, columns and indexes whose ``since`` equals the version),
and ``extra`` holds anything the schema cannot say (moving data, backfills). Versions are
positive, strictly increasing integers; a version once released never changes.

``schema_migrations(version, description, applied_at)`` records what has been applied.
:func:`migrate_sqlite` and :func:`migrate_postgres` apply the pending migrations in order, all in
one transaction, and return the versions they applied (``[]`` when up to date), so running them
twice is harmless. Concurrent starters are serialised: PostgreSQL by a transaction-scoped advisory
lock taken before anything is read, SQLite by ``BEGIN IMMEDIATE`` (the database write lock). DDL
is transactional in both, so a failed migration leaves nothing half applied.

A database that reports versions this code does not know (a newer release migrated it) is left
alone; migrations are additive, so older code keeps working with the columns it knows.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from traffic.store.config import Dialect
from traffic.store.partition_sql import conversion_sql
from traffic.store.schema import (
    INDEXES,
    SCHEMA_MIGRATIONS,
    TABLES,
    Index,
    Table,
    create_table_sql,
    ddl_for_version,
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection

# Any constant works; it only has to be the same in every process migrating one database.
ADVISORY_LOCK_KEY: Final = 0x5357_5944_5354_4F52  # "SWYDSTOR"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    extra: Mapping[Dialect, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))

    def statements(
        self,
        dialect: Dialect,
        tables: tuple[Table, ...] = TABLES,
        indexes: tuple[Index, ...] = INDEXES,
    ) -> list[str]:
        return [
            *ddl_for_version(self.version, dialect, tables, indexes),
            *self.extra.get(dialect, ()),
        ]


MIGRATIONS: Final = (
    Migration(1, "inference, feedback, shadow, model_version, policy_version, api_key"),
    # Rows written before it read back with cache_creation_tokens None: not recorded, not zero.
    Migration(2, "inference.cache_creation_tokens: prompt tokens written to the provider cache"),
    # Rows written before it read back with both None: the exporter translates them again.
    Migration(
        3,
        "inference.canonical_request, canonical_response: the exchange in the internal format",
    ),
    Migration(
        4,
        "change_log: who changed what and when; traffic_hourly: roll-ups for long windows;"
        " inference (served_model, id) index",
    ),
    Migration(5, "inference key and episode indexes: partial (rows with none are not indexed)"),
    # Rows written before it read back with every one None: their decisions are unknown.
    Migration(
        6,
        "inference decision_* and release_*, shadow_p, shadow_skipped: the routing decision typed"
        " (kind, target before fallback, p_local, threshold, propensity, state version, canary"
        " arm and its probability, the shadow draw)",
    ),
    Migration(7, "inference.release_other_target: the other canary arm's decision"),
    Migration(8, "routing_release: each release, its arms, share, status and deciding test"),
    # Rows written before it read back with training_use None (traffic.export.consent says how
    # the exporters treat them); keys before it have no team and no consent of their own.
    Migration(
        9,
        "consent: inference.training_use stamped when recorded; api_key.team_id and"
        " training_use; team: the settings a team's keys inherit",
    ),
    Migration(
        10,
        "lineage: dataset (the records each dataset was built from, compact, with its hashes);"
        " model_dataset: which datasets trained which checkpoint, and where they are",
    ),
    Migration(11, "model_taint: checkpoints trained on (or descended from) forgotten records"),
    # PostgreSQL: the tables as they were become one partition each, attached without a copy
    # (traffic.store.partition_sql); new days get partitions of their own from the retention pass.
    Migration(
        12,
        "retention: retention_window (per key and team); on PostgreSQL inference, feedback and"
        " shadow partitioned by day, so a day past every window is a partition drop",
        MappingProxyType({"postgres": conversion_sql()}),
    ),
)


def check_migrations(
    migrations: tuple[Migration, ...] = MIGRATIONS,
    tables: tuple[Table, ...] = TABLES,
    indexes: tuple[Index, ...] = INDEXES,
) -> None:
    """Raise ``ValueError`` unless versions increase and every ``since`` names a migration."""
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)) or (versions and versions[0] < 1):
        raise ValueError(f"migration versions must be positive and strictly increasing: {versions}")
    known = set(versions)
    sinces = [(t.name, t.since) for t in tables]
    sinces += [(f"{t.name}.{c.name}", c.since) for t in tables for c in t.columns]
    sinces += [(i.name, i.since) for i in indexes]
    sinces += [(f"{i.name} (dropped)", i.dropped) for i in indexes if i.dropped is not None]
    unknown = [(name, since) for name, since in sinces if since not in known]
    if unknown:
        raise ValueError(f"schema items added by migrations that do not exist: {unknown}")


def migrate_sqlite(
    conn: sqlite3.Connection,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    tables: tuple[Table, ...] = TABLES,
    indexes: tuple[Index, ...] = INDEXES,
) -> list[int]:
    """Apply pending migrations on an autocommit (``isolation_level=None``) connection."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(create_table_sql(SCHEMA_MIGRATIONS, "sqlite"))
        applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        done: list[int] = []
        for m in migrations:
            if m.version in applied:
                continue
            for statement in m.statements("sqlite", tables, indexes):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)",
                (m.version, m.description, time.time_ns() // 1000),
            )
            done.append(m.version)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return done


async def migrate_postgres(
    conn: AsyncConnection[tuple[object, ...]],
    migrations: tuple[Migration, ...] = MIGRATIONS,
    tables: tuple[Table, ...] = TABLES,
    indexes: tuple[Index, ...] = INDEXES,
) -> list[int]:
    """Apply pending migrations in the connection's current schema (its ``search_path``)."""
    done: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK_KEY,))
        await conn.execute(create_table_sql(SCHEMA_MIGRATIONS, "postgres"))
        cur = await conn.execute("SELECT version FROM schema_migrations")
        applied = {row[0] for row in await cur.fetchall()}
        for m in migrations:
            if m.version in applied:
                continue
            for statement in m.statements("postgres", tables, indexes):
                await conn.execute(statement)
            await conn.execute(
                "INSERT INTO schema_migrations (version, description, applied_at) "
                "VALUES (%s, %s, now())",
                (m.version, m.description),
            )
            done.append(m.version)
    return done
