"""The traffic store's schema, declared once and rendered per dialect.

Columns carry a logical type; only its rendering differs between dialects:

=========  ==========================  ======================================================
logical    PostgreSQL                  SQLite (STRICT tables)
=========  ==========================  ======================================================
ID         uuid                        TEXT, canonical lowercase form (sorts like the uuid)
KEY        text                        TEXT     (ids we do not mint: api keys, versions)
TEXT       text                        TEXT
INT        bigint                      INTEGER
FLOAT      double precision            REAL
BOOL       boolean                     INTEGER  0/1
TS         timestamptz                 INTEGER  microseconds since the Unix epoch, UTC
JSON       jsonb                       TEXT     JSON text
=========  ==========================  ======================================================

Timestamps in SQLite are integer microseconds: exact (the same precision as timestamptz), compact,
and compared as integers; ``datetime(ts / 1000000, 'unixepoch')`` shows them in SQL.

Ids are UUIDv7, so ``inference.id`` orders rows by time: time ranges are primary-key ranges, and
each secondary index is ``(column, id)`` so a filter plus a time range is one index range scan.
There are no foreign keys: feedback may arrive (or be replayed from a spool) before the inference
it points at, and the API validates references instead.

PostgreSQL partitions ``inference``, ``feedback`` and ``shadow`` by day of ``partition_by``
(:mod:`traffic.store.partition_sql`), where ``feedback`` and ``shadow`` are keyed
``(id, inference_id)``: a unique key must hold the partition column (:meth:`Table.key_columns`).

Evolution: every table, column and index has ``since``, the migration version that adds it.
Migration N creates the tables with ``since == N`` (with their columns of ``since <= N``), adds
the columns with ``since == N`` to older tables, and creates the indexes with ``since == N``; so
this file stays the one description of the current schema, and :mod:`traffic.store.migrations`
only lists versions, descriptions and any extra data-moving SQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final

from traffic.store.config import Dialect


class ColumnType(Enum):
    ID = "id"
    KEY = "key"
    TEXT = "text"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    TS = "ts"
    JSON = "json"


_PG_TYPES: Final = MappingProxyType(
    {
        ColumnType.ID: "uuid",
        ColumnType.KEY: "text",
        ColumnType.TEXT: "text",
        ColumnType.INT: "bigint",
        ColumnType.FLOAT: "double precision",
        ColumnType.BOOL: "boolean",
        ColumnType.TS: "timestamptz",
        ColumnType.JSON: "jsonb",
    }
)
_SQLITE_TYPES: Final = MappingProxyType(
    {
        ColumnType.ID: "TEXT",
        ColumnType.KEY: "TEXT",
        ColumnType.TEXT: "TEXT",
        ColumnType.INT: "INTEGER",
        ColumnType.FLOAT: "REAL",
        ColumnType.BOOL: "INTEGER",
        ColumnType.TS: "INTEGER",
        ColumnType.JSON: "TEXT",
    }
)


def sql_type(ctype: ColumnType, dialect: Dialect) -> str:
    return (_PG_TYPES if dialect == "postgres" else _SQLITE_TYPES)[ctype]


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: ColumnType
    nullable: bool = True
    since: int = 1


@dataclass(frozen=True, slots=True)
class Index:
    """``where``: a partial index's condition (rows it leaves out cost no index write);
    ``dropped``: the migration that drops it (it stays listed so older versions' DDL is fixed)."""

    name: str
    table: str
    columns: tuple[str, ...]
    unique: bool = False
    since: int = 1
    where: str | None = None
    dropped: int | None = None


# The migration that partitions the ``partition_by`` tables by day on PostgreSQL.
PARTITIONED_SINCE: Final = 12


@dataclass(frozen=True, slots=True)
class Table:
    """``partition_by``: the UUIDv7 column whose day partitions the table on PostgreSQL (from
    migration :data:`PARTITIONED_SINCE`); None: one table."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ("id",)
    since: int = 1
    partition_by: str | None = None

    def key_columns(self, dialect: Dialect) -> tuple[str, ...]:
        """The primary key as ``dialect`` holds it (with the partition column on PostgreSQL):
        what ``ON CONFLICT`` names."""
        extra = self.partition_by if dialect == "postgres" else None
        if extra is None or extra in self.primary_key:
            return self.primary_key
        return (*self.primary_key, extra)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name}")


def _req(name: str, ctype: ColumnType) -> Column:
    return Column(name, ctype, nullable=False)


def _opt(name: str, ctype: ColumnType, since: int = 1) -> Column:
    return Column(name, ctype, since=since)


_T = ColumnType
INFERENCE: Final = Table(
    "inference",
    (
        _req("id", _T.ID),
        _req("ts", _T.TS),
        _opt("api_key_id", _T.KEY),
        _opt("episode_id", _T.KEY),
        _req("endpoint", _T.TEXT),
        _req("wire_format", _T.TEXT),
        _req("request", _T.JSON),
        _opt("canonical_request", _T.JSON, since=3),
        _opt("response", _T.JSON),
        _opt("canonical_response", _T.JSON, since=3),
        _req("route_target", _T.TEXT),
        _req("served_model", _T.TEXT),
        _opt("weights_version", _T.TEXT),
        _opt("replica", _T.TEXT),
        _opt("policy_version", _T.TEXT),
        _opt("policy_reason", _T.TEXT),
        _req("status", _T.INT),
        _opt("error", _T.TEXT),
        _req("stream", _T.BOOL),
        _req("latency_ms", _T.FLOAT),
        _opt("ttft_ms", _T.FLOAT),
        _opt("prompt_tokens", _T.INT),
        _opt("completion_tokens", _T.INT),
        _opt("cached_tokens", _T.INT),
        _opt("cache_creation_tokens", _T.INT, since=2),
        _opt("cost_usd", _T.FLOAT),
        _req("tags", _T.JSON),
        _req("attempts", _T.JSON),
        # The routing decision, typed (migration 6): what off-policy estimates read.
        _opt("decision_kind", _T.TEXT, since=6),
        _opt("decision_target", _T.TEXT, since=6),
        _opt("decision_p_local", _T.FLOAT, since=6),
        _opt("decision_threshold", _T.FLOAT, since=6),
        _opt("decision_propensity", _T.FLOAT, since=6),
        _opt("decision_state_version", _T.TEXT, since=6),
        _opt("release_id", _T.TEXT, since=6),
        _opt("release_arm", _T.TEXT, since=6),
        _opt("release_p", _T.FLOAT, since=6),
        _opt("release_other_target", _T.TEXT, since=7),  # the other arm's decision
        _opt("shadow_p", _T.FLOAT, since=6),
        _opt("shadow_skipped", _T.BOOL, since=6),
        _opt("training_use", _T.TEXT, since=9),  # the caller's consent, stamped when recorded
    ),
    partition_by="id",
)
FEEDBACK: Final = Table(
    "feedback",
    (
        _req("id", _T.ID),
        _req("inference_id", _T.ID),
        _req("ts", _T.TS),
        _req("kind", _T.TEXT),
        _opt("value", _T.FLOAT),
        _opt("payload", _T.JSON),
    ),
    partition_by="inference_id",
)
SHADOW: Final = Table(
    "shadow",
    (
        _req("id", _T.ID),
        _req("inference_id", _T.ID),
        _req("ts", _T.TS),
        _req("target", _T.TEXT),
        _req("response", _T.JSON),
        _req("comparison", _T.JSON),
    ),
    partition_by="inference_id",
)
MODEL_VERSION: Final = Table(
    "model_version",
    (
        _req("id", _T.KEY),
        _opt("parent", _T.KEY),
        _req("created_at", _T.TS),
        _req("path", _T.TEXT),
        _req("metadata", _T.JSON),
        _req("eval", _T.JSON),
        _req("status", _T.TEXT),
    ),
)
POLICY_VERSION: Final = Table(
    "policy_version",
    (
        _req("id", _T.KEY),
        _req("created_at", _T.TS),
        _req("config", _T.JSON),
        _req("status", _T.TEXT),
    ),
)
API_KEY: Final = Table(
    "api_key",
    (
        _req("id", _T.KEY),
        _req("name", _T.TEXT),
        _req("key_hash", _T.TEXT),
        _req("prefix", _T.TEXT),
        _req("created_at", _T.TS),
        _opt("revoked_at", _T.TS),
        _opt("rpm_limit", _T.INT),
        _opt("tpm_limit", _T.INT),
        _opt("budget_usd", _T.FLOAT),
        _req("spent_usd", _T.FLOAT),
        _opt("team_id", _T.KEY, since=9),
        _opt("training_use", _T.TEXT, since=9),
    ),
)
# Teams (or tenants) that keys belong to, with the settings their keys inherit (consent).
TEAM: Final = Table(
    "team",
    (
        _req("id", _T.KEY),
        _req("created_at", _T.TS),
        _opt("training_use", _T.TEXT),
    ),
    since=9,
)
# Who changed what, when: routing policies (canary, promote, roll back), keys, replicas; written
# by the ops console and the admin API, read by the console's change history.
CHANGE_LOG: Final = Table(
    "change_log",
    (
        _req("id", _T.ID),
        _req("ts", _T.TS),
        _req("actor", _T.TEXT),
        _req("action", _T.TEXT),
        _opt("subject", _T.TEXT),
        _req("detail", _T.JSON),
    ),
    since=4,
)
# Each release of a routing candidate (a canary): its arms, share, status and the decision
# that ended it with the sequential test's bounds and counts (gateway.admin.releases). One row
# per release, updated as it goes; the change log keeps every step.
ROUTING_RELEASE: Final = Table(
    "routing_release",
    (
        _req("id", _T.KEY),
        _req("created_at", _T.TS),
        _req("updated_at", _T.TS),
        _req("status", _T.TEXT),
        _req("live_version", _T.TEXT),
        _opt("live_weights", _T.TEXT),
        _opt("candidate_weights", _T.TEXT),
        _req("routing", _T.JSON),
        _req("share", _T.FLOAT),
        _req("schedule", _T.JSON),
        _opt("decided_by", _T.TEXT),
        _req("decision", _T.JSON),
    ),
    since=8,
)
# Hourly roll-ups of the inference table, per grouping (``dim``) and route target, that the
# console reads for long windows (traffic.store.rollup): counts, cost, feedback and latency/TTFT
# histograms. ``value`` is the group's value as JSON text; rows whose value is the roll-up's
# marker say which hours of a grouping are rolled up.
TRAFFIC_HOURLY: Final = Table(
    "traffic_hourly",
    (
        _req("dim", _T.TEXT),
        _req("hour", _T.TS),
        _req("value", _T.TEXT),
        _req("route_target", _T.TEXT),
        _req("requests", _T.INT),
        _req("errors", _T.INT),
        _req("failovers", _T.INT),
        _req("cost_usd", _T.FLOAT),
        _req("accepted", _T.INT),
        _req("rejected", _T.INT),
        _req("edited", _T.INT),
        _req("latency_hist", _T.JSON),
        _req("ttft_hist", _T.JSON),
    ),
    primary_key=("dim", "hour", "value", "route_target"),
    since=4,
)
# The datasets checkpoints were trained on (migration 10), one row per dataset by its SHA-256
# (traffic.export.lineage): ``lineage`` holds the ids of the records it was built from, compact,
# with its hashes; ``first_id``/``last_id`` bound those ids (a lookup by record reads them before
# any id set); ``config`` is how it was built. Written by the model registry, never updated
# (StoreBackend.link_datasets).
DATASET: Final = Table(
    "dataset",
    (
        _req("id", _T.KEY),
        _req("created_at", _T.TS),
        _req("kind", _T.TEXT),
        _req("row_count", _T.INT),
        _opt("first_id", _T.KEY),
        _opt("last_id", _T.KEY),
        _req("lineage", _T.JSON),
        _req("config", _T.JSON),
    ),
    since=10,
)
# Which datasets trained which checkpoint (``model_version.id``), and where each dataset's files
# are (None: built in memory, rebuilt from its ids).
MODEL_DATASET: Final = Table(
    "model_dataset",
    (
        _req("model_version_id", _T.KEY),
        _req("dataset_id", _T.KEY),
        _opt("location", _T.TEXT),
    ),
    primary_key=("model_version_id", "dataset_id"),
    since=10,
)
# Checkpoints marked tainted by a forget (migration 11): trained on a record since forgotten
# (``via`` "trained"), or descended from one that was (``via`` the ancestor's id). Only ever
# added; ``forget_id`` is the forget's entry in the change log (``action`` "traffic.forget").
# Kept apart from ``model_version``, whose rows the model registry rewrites whole.
MODEL_TAINT: Final = Table(
    "model_taint",
    (
        _req("model_version_id", _T.KEY),
        _req("forget_id", _T.ID),
        _req("ts", _T.TS),
        _req("via", _T.TEXT),
    ),
    primary_key=("model_version_id", "forget_id"),
    since=11,
)
# How long a key's or a team's traffic is kept (traffic.store.retention_windows): ``subject``
# ``key:ID`` or ``team:ID``, ``days`` None for ever; no row: inherited.
RETENTION_WINDOW: Final = Table(
    "retention_window",
    (_req("subject", _T.KEY), _opt("days", _T.INT), _req("updated_at", _T.TS)),
    primary_key=("subject",),
    since=12,
)
# Bookkeeping of applied migrations; created before any migration runs, never migrated itself.
SCHEMA_MIGRATIONS: Final = Table(
    "schema_migrations",
    (_req("version", _T.INT), _req("description", _T.TEXT), _req("applied_at", _T.TS)),
    primary_key=("version",),
    since=0,
)

TABLES: Final = (
    INFERENCE,
    FEEDBACK,
    SHADOW,
    MODEL_VERSION,
    POLICY_VERSION,
    API_KEY,
    CHANGE_LOG,
    TRAFFIC_HOURLY,
    ROUTING_RELEASE,
    TEAM,
    DATASET,
    MODEL_DATASET,
    MODEL_TAINT,
    RETENTION_WINDOW,
)
INDEXES: Final = (
    Index("inference_route_target_id", "inference", ("route_target", "id")),
    Index("inference_api_key_id_id", "inference", ("api_key_id", "id"), dropped=5),
    Index("inference_episode_id_id", "inference", ("episode_id", "id"), dropped=5),
    Index("feedback_inference_id", "feedback", ("inference_id", "id")),
    Index("shadow_inference_id", "shadow", ("inference_id",)),
    Index("model_version_parent", "model_version", ("parent",)),
    Index("api_key_key_hash", "api_key", ("key_hash",), unique=True),
    # The console's traffic search by served model (target, key and episode have theirs above).
    Index("inference_served_model_id", "inference", ("served_model", "id"), since=4),
    # Most exchanges have no key (auth off) or no episode (no agent loop): the recorder writes
    # a row per exchange, and an index entry for each NULL would be a noticeable share of the
    # writer's cost a row (issue 16; docs/recording.md, "Figures behind traffic/'s choices"). A
    # lookup by key or episode (``= ?``) implies NOT NULL, so both databases use the partial index.
    Index(
        "inference_api_key_id_set",
        "inference",
        ("api_key_id", "id"),
        where="api_key_id IS NOT NULL",
        since=5,
    ),
    Index(
        "inference_episode_id_set",
        "inference",
        ("episode_id", "id"),
        where="episode_id IS NOT NULL",
        since=5,
    ),
    # The checkpoints a dataset trained (the primary key answers the other way round).
    Index("model_dataset_dataset_id", "model_dataset", ("dataset_id",), since=10),
)


def _column_sql(column: Column, dialect: Dialect) -> str:
    null = "" if column.nullable else " NOT NULL"
    return f"{column.name} {sql_type(column.type, dialect)}{null}"


def create_table_sql(table: Table, dialect: Dialect, version: int | None = None) -> str:
    """``CREATE TABLE IF NOT EXISTS`` with the columns that exist at ``version`` (all if None);
    on PostgreSQL from :data:`PARTITIONED_SINCE`, a ``partition_by`` table is the partitioned
    parent (its partitions: :mod:`traffic.store.partition_sql`)."""
    cols = [c for c in table.columns if version is None or c.since <= version]
    body = ",\n    ".join(_column_sql(c, dialect) for c in cols)
    tail = " STRICT" if dialect == "sqlite" else ""
    pk = ", ".join(table.primary_key)
    partitioned = version is None or version >= PARTITIONED_SINCE
    if dialect == "postgres" and table.partition_by is not None and partitioned:
        pk, tail = (
            ", ".join(table.key_columns(dialect)),
            f" PARTITION BY RANGE ({table.partition_by})",
        )
    return (
        f"CREATE TABLE IF NOT EXISTS {table.name} (\n    {body},\n    PRIMARY KEY ({pk})\n){tail}"
    )


def add_column_sql(table: Table, column: Column, dialect: Dialect) -> str:
    if not column.nullable:
        # An added NOT NULL column would need a default for existing rows; say so at import time.
        raise ValueError(f"{table.name}.{column.name}: columns added later must be nullable")
    return f"ALTER TABLE {table.name} ADD COLUMN {_column_sql(column, dialect)}"


def create_index_sql(index: Index) -> str:
    unique = "UNIQUE " if index.unique else ""
    cols = ", ".join(index.columns)
    where = f" WHERE {index.where}" if index.where else ""
    return f"CREATE {unique}INDEX IF NOT EXISTS {index.name} ON {index.table} ({cols}){where}"


def ddl_for_version(
    version: int,
    dialect: Dialect,
    tables: tuple[Table, ...] = TABLES,
    indexes: tuple[Index, ...] = INDEXES,
) -> list[str]:
    """The DDL that migration ``version`` runs: new tables, new columns, new indexes."""
    statements: list[str] = []
    for table in tables:
        if table.since == version:
            statements.append(create_table_sql(table, dialect, version))
        elif table.since < version:
            statements.extend(
                add_column_sql(table, c, dialect) for c in table.columns if c.since == version
            )
    statements.extend(create_index_sql(i) for i in indexes if i.since == version)
    statements.extend(f"DROP INDEX IF EXISTS {i.name}" for i in indexes if i.dropped == version)
    return statements
