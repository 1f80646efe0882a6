"""PostgreSQL's day partitions of the traffic tables: names, bounds and DDL text (no I/O).

The tables with ``partition_by`` (:mod:`traffic.store.schema`: ``inference`` on ``id``,
``feedback`` and ``shadow`` on ``inference_id``) are partitioned by RANGE of that UUIDv7
column: a day's partition holds the ids from the smallest id of its midnight (UTC) to the
next midnight's (:func:`day_bounds`), so an inference, its feedback and its shadow answers
share a day and go together. Ids carry their time (:mod:`traffic.store.ids`): the partition key
is the primary key, and a time window stays a primary-key range that skips other days.

Per table ``T``:

- ``T_dYYYYMMDD``: one day (:func:`day_partition`), made ahead by the retention pass
  (:mod:`traffic.store.partitions`), dropped when every row in it is past its key's window;
- ``T_before``: the rows a database held when it was partitioned (migration 12), the old table
  attached whole from MINVALUE to the midnight after its newest row and after the migration's
  day (no copy: one scan to check the bound); its rows expire by row deletes;
- ``T_default``: what no other partition takes (a day not made yet, or a day already
  dropped that a late spool replay writes into again); row deletes too.

:func:`conversion_sql` is migration 12: each table renamed ``T_before`` (its indexes too), the
partitioned ``T`` created with the same indexes and a default partition, then ``T_before``
attached (a database with no rows drops it instead). Partition bounds are uuid literals this
module makes from dates, never from input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

from traffic.store.ids import min_id_at
from traffic.store.schema import (
    INDEXES,
    PARTITIONED_SINCE,
    TABLES,
    Index,
    Table,
    create_index_sql,
    create_table_sql,
)

PARTITIONED: Final = tuple(t for t in TABLES if t.partition_by is not None)
BEFORE: Final = "before"
DEFAULT: Final = "default"
_DAY_NAME: Final = re.compile(r"^(?P<table>[a-z_]+)_d(?P<day>\d{8})$")
_BOUND: Final = re.compile(r"FROM \((?P<lo>[^)]*)\) TO \((?P<hi>[^)]*)\)")


def day_of(moment: datetime) -> date:
    """The UTC day of ``moment`` (aware)."""
    return moment.astimezone(UTC).date()


def day_bounds(day: date) -> tuple[str, str]:
    """The id range of ``day``: its midnight's smallest id, inclusive, to the next one's."""
    start = datetime.combine(day, time(), UTC)
    return min_id_at(start), min_id_at(start + timedelta(days=1))


def day_partition(table: str, day: date) -> str:
    return f"{table}_d{day:%Y%m%d}"


def partition_day(name: str) -> date | None:
    """The day a partition named by :func:`day_partition` holds; None for another name."""
    match = _DAY_NAME.match(name)
    if match is None:
        return None
    return datetime.strptime(match["day"], "%Y%m%d").date()


def parse_bound(expression: str) -> tuple[str | None, str | None] | None:
    """``(lo, hi)`` of a range partition's ``pg_get_expr(relpartbound)`` (None for MINVALUE or
    MAXVALUE); None for the default partition."""
    match = _BOUND.search(expression)
    if match is None:
        return None

    def value(text: str) -> str | None:
        return None if text in ("MINVALUE", "MAXVALUE") else text.strip("'")

    return value(match["lo"]), value(match["hi"])


@dataclass(frozen=True, slots=True)
class KeptRows:
    """The inferences of a day a rebuild keeps: those of ``keys``, and when ``default`` those
    with no key or a key not among ``known`` (they take the default window)."""

    keys: tuple[str, ...]
    default: bool
    known: tuple[str, ...]

    @property
    def nothing(self) -> bool:
        """No row of the day is kept, whatever its key."""
        return not self.keys and not self.default

    def condition(self) -> tuple[str, list[Any]]:
        sql = (
            "(api_key_id = ANY(%s::text[]) OR (%s AND (api_key_id IS NULL"
            " OR NOT api_key_id = ANY(%s::text[]))))"
        )
        return sql, [list(self.keys), self.default, list(self.known)]


def create_day_sql(table: Table, day: date) -> str:
    lo, hi = day_bounds(day)
    name = day_partition(table.name, day)
    return f"CREATE TABLE {name} PARTITION OF {table.name} FOR VALUES FROM ('{lo}') TO ('{hi}')"


def _live_indexes(table: Table) -> list[Index]:
    """``table``'s indexes as migration 12 finds them."""
    return [
        i
        for i in INDEXES
        if i.table == table.name
        and i.since < PARTITIONED_SINCE
        and (i.dropped is None or i.dropped > PARTITIONED_SINCE)
    ]


def _renamed(table: Table, name: str) -> str:
    return f"{table.name}_{BEFORE}{name.removeprefix(table.name)}"


def _ms_of(column: str) -> str:
    """SQL: the millisecond timestamp (bigint) of a UUIDv7 value."""
    return (
        f"('x' || lpad(substr(replace({column}::text, '-', ''), 1, 12), 16, '0'))::bit(64)::bigint"
    )


def _attach_block() -> str:
    """A DO block: the newest day a ``T_before`` holds, then each attached up to the midnight
    after it (or dropped when empty)."""
    maxima = " UNION ALL ".join(  # PostgreSQL has no max(uuid); each is an index's end
        f"SELECT (SELECT {t.partition_by} FROM {t.name}_{BEFORE}"
        f" ORDER BY {t.partition_by} DESC LIMIT 1) AS u"
        for t in PARTITIONED
    )
    attach = "\n".join(
        f"  IF EXISTS (SELECT 1 FROM {t.name}_{BEFORE}) THEN\n"
        f"    EXECUTE format('ALTER TABLE {t.name} ATTACH PARTITION {t.name}_{BEFORE}"
        f" FOR VALUES FROM (MINVALUE) TO (%L)', bound);\n"
        f"  ELSE\n    DROP TABLE {t.name}_{BEFORE};\n  END IF;"
        for t in PARTITIONED
    )
    return (
        "DO $$\nDECLARE\n"
        "  top bigint := (extract(epoch FROM now()) * 1000)::bigint;\n"
        "  ms bigint;\n  bound uuid;\nBEGIN\n"
        f"  FOR ms IN SELECT {_ms_of('u')} FROM ({maxima}) AS m WHERE u IS NOT NULL LOOP\n"
        "    top := greatest(top, ms);\n  END LOOP;\n"
        "  bound := (lpad(to_hex((top / 86400000 + 1) * 86400000), 12, '0')"
        " || repeat('0', 20))::uuid;\n"
        f"{attach}\nEND\n$$"
    )


def conversion_sql() -> tuple[str, ...]:
    """Migration 12 on PostgreSQL (module docstring)."""
    statements: list[str] = []
    for table in PARTITIONED:
        old = f"{table.name}_{BEFORE}"
        statements += [
            f"ALTER TABLE {table.name} RENAME TO {old}",
            f"ALTER INDEX IF EXISTS {table.name}_pkey RENAME TO {old}_pkey",
        ]
        if table.key_columns("postgres") != table.primary_key:
            # Attaching builds the wider key on the old table.
            statements.append(f"ALTER TABLE {old} DROP CONSTRAINT IF EXISTS {old}_pkey")
        indexes = _live_indexes(table)
        statements += [
            f"ALTER INDEX IF EXISTS {i.name} RENAME TO {_renamed(table, i.name)}" for i in indexes
        ]
        statements.append(create_table_sql(table, "postgres", PARTITIONED_SINCE))
        # On the parent first: attaching the old table then adopts its equal indexes.
        statements += [create_index_sql(i) for i in indexes]
        statements.append(f"CREATE TABLE {table.name}_{DEFAULT} PARTITION OF {table.name} DEFAULT")
    statements.append(_attach_block())
    return tuple(statements)
