"""SQL text and value encoding shared by both backends; pure functions, no I/O.

A :class:`Codec` turns record values into driver parameters and back, per logical column type
(see :mod:`traffic.store.schema` for the per-dialect storage). JSON is encoded as strict JSON text
for both dialects (PostgreSQL casts the untyped text parameter to ``jsonb``); NaN and infinities,
which JSON cannot hold (client bodies never carry them: they are parsed strictly), are stored as
``null`` rather than losing the record; on PostgreSQL a NUL character (which neither
text nor jsonb can hold) is stored as U+FFFD. Encoding failures raise :class:`StoreDataError`, so a
record that cannot be stored is told apart from a database that cannot be reached.

Statements use positional parameters, ``?`` for sqlite3 and ``%s`` for psycopg.
"""

from __future__ import annotations

import asyncio
import json
import operator
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

import orjson

from traffic.store.config import Dialect
from traffic.store.errors import StoreDataError
from traffic.store.ids import min_id_at
from traffic.store.records import GROUP_KEYS, InferenceFilter, JsonText
from traffic.store.schema import ColumnType, Table
from traffic.store.yielding import slices

Row = tuple[Any, ...]
R = TypeVar("R")

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


# PostgreSQL's text and jsonb cannot hold U+0000 and refuse the whole row; a client may send
# it (a pasted binary, a hostile body). It is stored as U+FFFD instead of losing the record.
# In JSON text, a NUL is the escape \u0000 behind an even run of backslashes.
_CANONICAL_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_JSON_NUL: Final = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def dumps_json(value: object) -> str:
    """Compact JSON text. orjson (about 10x the standard library's speed on a record's request
    and answer; NaN and infinities become null); what it will not encode (lone surrogates,
    integers over 64 bits, non-string keys) goes to the standard library, which refuses NaN.
    A :class:`~traffic.store.records.JsonText` is already JSON: its text as it is."""
    if type(value) is JsonText:
        return value.text
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class Codec:
    """Parameter encoding for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect: Dialect = dialect
        self.param = "?" if dialect == "sqlite" else "%s"

    def encode(self, ctype: ColumnType, value: Any) -> Any:
        if value is None:
            return None
        encode = self.encoder(ctype)
        return value if encode is None else encode(value)

    def encoder(self, ctype: ColumnType) -> Callable[[Any], Any] | None:
        """The function that encodes a value (not None) of ``ctype`` for this dialect; None
        where the value goes as it is. Chosen once per column: a per-value dispatch on the
        type and dialect cost about as much as the encoding itself (the record writer encodes
        9 of the inference table's 29 columns per row on SQLite)."""
        if ctype is ColumnType.JSON:
            return _json_postgres if self.dialect == "postgres" else dumps_json
        if self.dialect == "postgres":
            return bool if ctype is ColumnType.BOOL else _text_postgres
        if ctype is ColumnType.TS:
            return _ts_sqlite
        if ctype is ColumnType.BOOL:
            return _bool_sqlite
        if ctype is ColumnType.ID:
            return _id_sqlite
        return None

    def decode(self, ctype: ColumnType, value: Any) -> Any:
        if value is None:
            return None
        if ctype is ColumnType.JSON:
            return json.loads(value) if isinstance(value, str) else value
        if ctype is ColumnType.TS:
            if isinstance(value, datetime):
                return value.astimezone(UTC)
            return _EPOCH + value * _MICROSECOND
        if ctype is ColumnType.BOOL:
            return bool(value)
        if ctype is ColumnType.ID:
            return str(value)
        return value

    def encode_id(self, value: str) -> str:
        return self.encode(ColumnType.ID, value)  # type: ignore[no-any-return]


def _json_postgres(value: object) -> str:
    text = dumps_json(value)
    return _JSON_NUL.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


def _text_postgres(value: Any) -> Any:
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value


def _ts_sqlite(value: datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


def _bool_sqlite(value: object) -> int:
    return int(bool(value))


def _id_sqlite(value: str) -> str:
    if isinstance(value, str) and _CANONICAL_UUID.fullmatch(value):
        return value  # our own ids: already canonical (a regex is ~8x cheaper)
    return str(uuid.UUID(value))  # canonical lowercase, as PostgreSQL's uuid prints it


def encode_rows(table: Table, records: Sequence[object], codec: Codec) -> list[Row]:
    """Parameters for inserting ``records`` (field names = column names) into ``table``.

    Only the columns whose type needs it go through the codec (on SQLite, 9 of the inference
    table's 29): a generic per-column loop cost about twice the encoding itself."""
    names = table.column_names
    read = operator.attrgetter(*names) if len(names) > 1 else lambda r: (getattr(r, names[0]),)
    encoders = [(i, enc) for i, c in enumerate(table.columns) if (enc := codec.encoder(c.type))]
    rows: list[Row] = []
    try:
        for r in records:
            values = list(read(r))
            for i, enc in encoders:
                v = values[i]
                if v is not None:
                    values[i] = enc(v)
            rows.append(tuple(values))
    except (TypeError, ValueError, AttributeError) as e:
        raise StoreDataError(f"cannot encode a {table.name} row: {e}") from e
    return rows


ENCODE_CHUNK = 64


async def encode_rows_async(
    table: Table, records: Sequence[object], codec: Codec, yield_every: int = 0
) -> list[Row]:
    """:func:`encode_rows` on the event loop, yielding to it every ``ENCODE_CHUNK`` records.

    Encoding is pure Python; in a worker thread it would hold the GIL against the request path
    for up to a switch interval (5 ms) at a time, which costs more than doing it here in slices.
    ``yield_every`` (the writer process): the CPU given back every that many records
    (:func:`traffic.store.yielding.slices`).
    """
    rows: list[Row] = []
    for start in range(0, len(records), ENCODE_CHUNK):
        for part in slices(records[start : start + ENCODE_CHUNK], yield_every):
            rows.extend(encode_rows(table, part, codec))
        await asyncio.sleep(0)
    return rows


def decode_row(cls: type[R], table: Table, row: Row, codec: Codec) -> R:
    values = {c.name: codec.decode(c.type, v) for c, v in zip(table.columns, row, strict=True)}
    return cls(**values)


def select_list(table: Table, alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + name for name in table.column_names)


def insert_sql(table: Table, codec: Codec, *, on_conflict_ignore: bool = True) -> str:
    marks = ", ".join(codec.param for _ in table.columns)
    sql = f"INSERT INTO {table.name} ({select_list(table)}) VALUES ({marks})"
    if on_conflict_ignore:
        sql += f" ON CONFLICT ({', '.join(table.key_columns(codec.dialect))}) DO NOTHING"
    return sql


def upsert_sql(table: Table, codec: Codec, *, keep: tuple[str, ...] = ("created_at",)) -> str:
    """Insert, or update every column except the key and ``keep`` on conflict."""
    updated = [
        f"{name} = excluded.{name}"
        for name in table.column_names
        if name not in table.primary_key and name not in keep
    ]
    base = insert_sql(table, codec, on_conflict_ignore=False)
    key = ", ".join(table.key_columns(codec.dialect))
    return f"{base} ON CONFLICT ({key}) DO UPDATE SET {', '.join(updated)}"


def in_ids(column: str, ids: Sequence[str], codec: Codec) -> tuple[str, list[Any]]:
    """``column`` is one of ``ids`` (uuid column)."""
    encoded = [codec.encode_id(i) for i in ids]
    if codec.dialect == "postgres":
        return f"{column} = ANY(%s::uuid[])", [encoded]
    return f"{column} IN ({', '.join('?' for _ in encoded)})", encoded


def in_keys(column: str, values: Sequence[str], codec: Codec) -> tuple[str, list[Any]]:
    """``column`` is one of ``values`` (text column)."""
    if codec.dialect == "postgres":
        return f"{column} = ANY(%s)", [list(values)]
    return f"{column} IN ({', '.join('?' for _ in values)})", list(values)


def inference_where(f: InferenceFilter | None, codec: Codec) -> tuple[str, list[Any]]:
    """A WHERE condition on ``inference i`` for ``f`` and its parameters."""
    if f is None:
        return "1 = 1", []
    p = codec.param
    clauses: list[str] = []
    params: list[Any] = []
    if f.since is not None:
        clauses.append(f"i.id >= {p}")
        params.append(min_id_at(f.since))
    if f.until is not None:
        clauses.append(f"i.id < {p}")
        params.append(min_id_at(f.until))
    for column in ("route_target", "served_model", "api_key_id", "endpoint", "episode_id"):
        value = getattr(f, column)
        if value is not None:
            clauses.append(f"i.{column} = {p}")
            params.append(value)
    if f.tags:
        if codec.dialect == "postgres":
            clauses.append("i.tags @> %s::jsonb")
            params.append(dumps_json(f.tags))
        else:
            for key, value in sorted(f.tags.items()):
                clauses.append(
                    "EXISTS (SELECT 1 FROM json_each(i.tags) AS t WHERE t.key = ? AND t.value = ?)"
                )
                params.extend((key, value))
    if f.has_feedback is not None:
        kind = "" if f.has_feedback == "any" else f" AND fb.kind = {p}"
        clauses.append(f"EXISTS (SELECT 1 FROM feedback fb WHERE fb.inference_id = i.id{kind})")
        if f.has_feedback != "any":
            params.append(f.has_feedback)
    if f.ok_only:
        clauses.append("i.status < 400 AND i.error IS NULL")
    return (" AND ".join(clauses) or "1 = 1"), params


def check_group_by(group_by: Sequence[str]) -> list[str]:
    keys = list(group_by)
    unknown = [k for k in keys if k not in GROUP_KEYS]
    if unknown or len(set(keys)) != len(keys):
        raise ValueError(f"group_by takes distinct keys among {GROUP_KEYS}, got {keys}")
    return keys


def group_expr(key: str, dialect: Dialect) -> str:
    if key == "day":
        if dialect == "postgres":
            return "to_char(i.ts AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
        return "strftime('%Y-%m-%d', i.ts / 1000000, 'unixepoch')"
    return f"i.{key}"


def feedback_count(kind: str) -> str:
    """Correlated count of one feedback kind for inference ``i`` (kind is a trusted constant)."""
    return f"(SELECT count(*) FROM feedback f WHERE f.inference_id = i.id AND f.kind = '{kind}')"


def postgres_summary_sql(where: str, group_by: Sequence[str]) -> str:
    """One aggregate row per group: count, errors, cost, percentiles, feedback counts."""
    groups = [group_expr(k, "postgres") for k in group_by]
    select_groups = "".join(f"{g} AS g{n}, " for n, g in enumerate(groups))
    group_clause = f" GROUP BY {', '.join(groups)}" if groups else ""
    return (
        f"SELECT {select_groups}count(*)::bigint,"
        " (count(*) FILTER (WHERE NOT (i.status < 400 AND i.error IS NULL)))::bigint,"
        " coalesce(sum(i.cost_usd), 0)::float8,"
        " percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY i.latency_ms),"
        " percentile_cont(ARRAY[0.5, 0.9]) WITHIN GROUP (ORDER BY i.ttft_ms),"
        " coalesce(sum(fb.accepted), 0)::bigint, coalesce(sum(fb.rejected), 0)::bigint,"
        " coalesce(sum(fb.edited), 0)::bigint"
        " FROM inference i LEFT JOIN LATERAL (SELECT"
        " count(*) FILTER (WHERE f.kind = 'accepted') AS accepted,"
        " count(*) FILTER (WHERE f.kind = 'rejected') AS rejected,"
        " count(*) FILTER (WHERE f.kind = 'edited') AS edited"
        " FROM feedback f WHERE f.inference_id = i.id) fb ON true"
        f" WHERE {where}{group_clause}"
    )


def sqlite_summary_sql(where: str, group_by: Sequence[str]) -> str:
    """One narrow row per inference: group keys, ok, cost, latency, TTFT, feedback counts."""
    groups = "".join(f"{group_expr(k, 'sqlite')}, " for k in group_by)
    return (
        f"SELECT {groups}(i.status < 400 AND i.error IS NULL), i.cost_usd, i.latency_ms,"
        f" i.ttft_ms, {feedback_count('accepted')}, {feedback_count('rejected')},"
        f" {feedback_count('edited')} FROM inference i WHERE {where}"
    )
