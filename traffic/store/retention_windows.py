"""Retention windows: how many days the traffic of each key is kept.

The window of a record, first that is set:

    its key's own  ->  its key's team's  ->  the default (``StoreConfig.retention_days``)

Each is a number of days (at least 1) or None, kept forever. A key's or a team's is a row of
``retention_window`` (migration 12) by subject, ``key:ID`` or ``team:ID``
(:func:`key_subject`, :func:`team_subject`); no row: inherited. A record with no key (or a key
the store does not know) takes the default.

Age is counted in whole UTC days of the record's id (its UUIDv7 time: when it was recorded,
what the store's time windows read): with a window of ``W`` days, the records of today and of
the ``W`` days before are kept, those of earlier days have expired (:meth:`Windows.expires`).
So every record of one key and one day expires at once, which is what lets PostgreSQL drop a
day's partition whole (:mod:`traffic.retention`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Final

from traffic.store.backend import StoreBackend
from traffic.store.console_queries import sql_store
from traffic.store.partition_sql import KeptRows
from traffic.store.queries import decode_row, encode_rows, select_list, upsert_sql
from traffic.store.records import utc_now
from traffic.store.schema import RETENTION_WINDOW, ColumnType

KEY_PREFIX: Final = "key:"
TEAM_PREFIX: Final = "team:"


def key_subject(key_id: str) -> str:
    return f"{KEY_PREFIX}{key_id}"


def team_subject(team_id: str) -> str:
    return f"{TEAM_PREFIX}{team_id}"


def check_days(days: int | None) -> int | None:
    """``days`` if it is a window (None, or 1 or more); ValueError otherwise."""
    if days is not None and (isinstance(days, bool) or days < 1):
        raise ValueError(f"a retention window is at least 1 day (or None: forever), got {days}")
    return days


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionWindowRecord:
    """``subject``'s own window (``days`` None: forever), and when it was set."""

    subject: str
    days: int | None = None
    updated_at: datetime = field(default_factory=utc_now)


async def set_window(store: StoreBackend, subject: str, days: int | None) -> RetentionWindowRecord:
    """Give ``subject`` (``key:ID`` or ``team:ID``) its own window."""
    if not subject.startswith((KEY_PREFIX, TEAM_PREFIX)) or subject in (KEY_PREFIX, TEAM_PREFIX):
        raise ValueError(f"a window's subject is key:ID or team:ID, got {subject!r}")
    record = RetentionWindowRecord(subject=subject, days=check_days(days))
    s = sql_store(store)
    (row,) = encode_rows(RETENTION_WINDOW, [record], s.codec)
    await s._fetch(upsert_sql(RETENTION_WINDOW, s.codec), row, write=True)
    return record


async def clear_window(store: StoreBackend, subject: str) -> bool:
    """``subject`` inherits again; False when it had no window of its own."""
    s = sql_store(store)
    rows = await s._fetch(
        f"DELETE FROM retention_window WHERE subject = {s.codec.param} RETURNING subject",
        [s.codec.encode(ColumnType.KEY, subject)],
        write=True,
    )
    return bool(rows)


async def stored_windows(store: StoreBackend) -> list[RetentionWindowRecord]:
    """Every key's and team's own window, by subject."""
    s = sql_store(store)
    rows = await s._fetch(
        f"SELECT {select_list(RETENTION_WINDOW)} FROM retention_window ORDER BY subject", []
    )
    return [decode_row(RetentionWindowRecord, RETENTION_WINDOW, r, s.codec) for r in rows]


@dataclass(frozen=True, slots=True)
class Windows:
    """The window of every key the store knows (``keys``) and of the others (``default``)."""

    default: int | None
    keys: Mapping[str, int | None]

    def of(self, key_id: str | None) -> int | None:
        if key_id is None:
            return self.default
        return self.keys.get(key_id, self.default)

    def expires(self, key_id: str | None, day: date, today: date) -> bool:
        """Whether ``key_id``'s records of ``day`` have expired by ``today``."""
        days = self.of(key_id)
        return days is not None and day < today - timedelta(days=days)

    @property
    def shortest(self) -> int | None:
        """The shortest window there is; None when everything is kept forever."""
        finite = [d for d in (self.default, *self.keys.values()) if d is not None]
        return min(finite, default=None)

    def kept(self, day: date, today: date) -> KeptRows:
        """Which of ``day``'s rows are still within their windows ``today``, by key."""
        keys = tuple(sorted(k for k in self.keys if not self.expires(k, day, today)))
        default = not self.expires(None, day, today)
        return KeptRows(keys, default, tuple(sorted(self.keys)))


async def resolve_windows(store: StoreBackend, default: int | None) -> Windows:
    """Every known key's window now (module docstring); ``default`` for the rest."""
    own = {w.subject: w.days for w in await stored_windows(store)}
    keys: dict[str, int | None] = {}
    for key in await store.list_api_keys():
        subject = key_subject(key.id)
        team = team_subject(key.team_id) if key.team_id is not None else None
        if subject in own:
            keys[key.id] = own[subject]
        elif team is not None and team in own:
            keys[key.id] = own[team]
        else:
            keys[key.id] = default
    return Windows(check_days(default), keys)
