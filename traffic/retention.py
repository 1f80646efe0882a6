"""Retention: each record deleted once past its key's window, the way a forget deletes.

:func:`retention_pass` (``switchyard traffic retention``; a gateway process runs it every
``store.retention_interval_s`` on the fleet's lease: :func:`scheduled_pass`):

1. resolves every key's window (:mod:`traffic.store.retention_windows`: the key's own, its
   team's, the default); today is the UTC day of ``now``. A window of ``W`` days keeps today
   and the ``W`` days before, so a day's records expire together, key by key;
2. on PostgreSQL, takes the database's retention lock (a pass that finds it taken does nothing
   and says ``busy``), and makes the day partitions of today and :data:`AHEAD_DAYS` ahead
   (:mod:`traffic.store.partitions`);
3. for each day before today less the shortest window that holds rows (found on the id index)
   or has a partition, oldest first: reads the day's ids and keys and takes the expired ones;
   then the spool and its dead letters once for every day (one scan and one rewrite: the
   expired days' records and what expired only in the spool, with what points at them), and
   per day erases the expired as a forget does (:func:`traffic.erase.erase`: exported files that
   list them, then the store), the store's step chosen for the day:

   - ``drop``: PostgreSQL, the day has its partitions and every row in it is expired: the
     partitions are dropped, in milliseconds whatever their size;
   - ``rebuild``: a partition, and fewer rows kept (keys with longer windows) than expired:
     the kept rows are copied into new partitions that replace the day's;
   - ``delete``: otherwise (SQLite; the partitions ``before`` and ``default``; a day mostly
     kept): row deletes, :func:`traffic.store.forgetting.delete_rows`.

   A day's rows the default partition took besides its own are row-deleted after a drop or a
   rebuild. Spooled and dead-lettered inferences past their windows go too, whatever their day;
4. appends one audit entry when any record went (change log, action ``traffic.retention``, actor
   ``retention``): per day its method and the rows per table, the spool's records, the export
   folders; ids, paths and counts only, no content.

A partition is dropped only when nothing in it is still within a window, or rebuilt around what
is: a drop never takes a longer window's rows. Copying the kept rows costs what deleting the
expired ones would when they are as many, so a day mostly kept is row-deleted instead.

No checkpoint is tainted: a forget withdraws the records and what was learned from them; a
window bounds how long the records themselves are kept. ``dry_run``: what would go (days,
methods, rows; spooled records), nothing changed, no audit entry.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from traffic.erase import Erased, erase, find_in_spool
from traffic.export.forget_files import ExportsForgotten
from traffic.export.lineage_store import records_uses
from traffic.export.wire_formats import LegacyTranslator
from traffic.store import InferenceRecord, StoreBackend, StoreConfig, new_id
from traffic.store.console_queries import record_change, sql_store
from traffic.store.forgetting import delete_rows
from traffic.store.partition_sql import day_bounds
from traffic.store.records import ChangeRecord
from traffic.store.retention_windows import Windows, resolve_windows
from traffic.store.spool_forget import SpoolForgotten, SpoolScope

if TYPE_CHECKING:
    from traffic.store.partitions import DayPartitions

log = logging.getLogger("traffic.retention")

RETENTION_ACTION: Final = "traffic.retention"
RETENTION_ACTOR: Final = "retention"
AHEAD_DAYS: Final = 7  # a week of partitions ahead: a week of passes may fail before one lacks
Method = Literal["drop", "rebuild", "delete"]


@dataclass(slots=True)
class DayExpiry:
    """One day's expiry: how (``method``), the inferences past their window and within it
    when read, and the rows deleted by table (none in a dry run)."""

    day: date
    method: Method
    expired: int
    kept: int
    deleted: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class RetentionReport:
    """What a pass did (the audit entry's detail, plus its id)."""

    retention_id: str
    today: date
    dry_run: bool
    windows: dict[str, Any]
    days: list[DayExpiry] = field(default_factory=list)
    partitions_made: list[date] = field(default_factory=list)
    spool: SpoolForgotten = field(default_factory=SpoolForgotten)
    exports: ExportsForgotten = field(default_factory=ExportsForgotten)
    busy: bool = False  # another pass held the database's retention lock

    @property
    def deleted(self) -> dict[str, int]:
        total = {"inferences": 0, "feedback": 0, "shadows": 0}
        for d in self.days:
            for name, n in d.deleted.items():
                total[name] = total.get(name, 0) + n
        return total

    @property
    def changed(self) -> bool:
        spooled = sum(self.spool.segments.values()) + self.spool.dead_letters
        exported = self.exports.rewritten or self.exports.deleted
        return bool(any(self.deleted.values()) or spooled or exported)

    def detail(self) -> dict[str, Any]:
        """The audit entry: days, methods and counts, paths; no content."""
        return {
            "today": self.today.isoformat(),
            "dry_run": self.dry_run,
            "windows": self.windows,
            "days": [{**asdict(d), "day": d.day.isoformat()} for d in self.days],
            "deleted": self.deleted,
            "partitions_made": [d.isoformat() for d in self.partitions_made],
            "spool": asdict(self.spool),
            "exports": asdict(self.exports),
            "busy": self.busy,
        }


def id_day(inference_id: str) -> date:
    """The UTC day of an id's 48-bit millisecond prefix (a UUIDv7's time; any uuid sorts so)."""
    ms = int(inference_id.replace("-", "")[:12], 16)
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).date()


async def _days_with_rows(store: StoreBackend, before: date) -> list[date]:
    """The days before ``before`` that hold inferences, found on the id index."""
    s = sql_store(store)
    p, end = s.codec.param, s.codec.encode_id(day_bounds(before)[0])
    days: list[date] = []
    lower: str | None = None
    while True:
        where, params = f"id < {p}", [end]
        if lower is not None:
            where, params = f"{where} AND id >= {p}", [end, s.codec.encode_id(lower)]
        rows = await s._fetch(f"SELECT id FROM inference WHERE {where} ORDER BY id LIMIT 1", params)
        if not rows:
            return days
        days.append(id_day(str(rows[0][0])))
        lower = day_bounds(days[-1])[1]


async def _day_rows(store: StoreBackend, day: date) -> list[tuple[str, str | None]]:
    """``(id, api_key_id)`` of the day's inferences."""
    s = sql_store(store)
    p = s.codec.param
    lo, hi = (s.codec.encode_id(b) for b in day_bounds(day))
    rows = await s._fetch(  # as text: no uuid object made per row
        f"SELECT CAST(id AS TEXT), api_key_id FROM inference WHERE id >= {p} AND id < {p}",
        [lo, hi],
    )
    return [(r[0], r[1]) for r in rows]


def _method(partitioned: bool, expired: int, kept: int) -> Method:
    if partitioned and kept == 0:
        return "drop"
    if partitioned and kept < expired:
        return "rebuild"
    return "delete"


_NAMES: Final = {"inference": "inferences", "feedback": "feedback", "shadow": "shadows"}


async def _store_step(
    store: StoreBackend,
    parts: DayPartitions | None,
    windows: Windows,
    today: date,
    expiry: DayExpiry,
    expired: list[str],
) -> dict[str, int]:
    """The day's rows deleted by ``expiry.method`` (``expired``: the day's inferences past
    their windows, for row deletes); rows deleted by table."""
    day = expiry.day
    kept = windows.kept(day, today)
    done = None
    if parts is not None and expiry.method == "drop":
        done = await parts.drop(day, kept)
        done = None if done is None else {**done, "inference": expiry.expired}
    elif parts is not None and expiry.method == "rebuild":
        done = await parts.rebuild(day, kept)
    if done is None:  # no partition step, or a row to keep arrived since the day was read
        expiry.method = "delete"
        return await delete_rows(store, expired)
    counts = {_NAMES[t]: n for t, n in done.items()}
    # What the default partition holds of the day (written there after its partitions went).
    rest = [i for i, key in await _day_rows(store, day) if windows.expires(key, day, today)]
    for name, n in (await delete_rows(store, rest)).items():
        counts[name] = counts.get(name, 0) + n
    return counts


def _add(report: RetentionReport, erased: Erased) -> None:
    for kind, n in erased.spool.segments.items():
        report.spool.segments[kind] = report.spool.segments.get(kind, 0) + n
    report.spool.dead_letters += erased.spool.dead_letters
    report.spool.busy = sorted(set(report.spool.busy) | set(erased.spool.busy))
    report.exports.rewritten += erased.exports.rewritten
    report.exports.deleted += erased.exports.deleted
    report.exports.unknown.update(erased.exports.unknown)
    report.exports.rows += erased.exports.rows


async def retention_pass(
    store: StoreBackend,
    default_days: int | None,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    spool_dirs: Sequence[Path] = (),
    export_roots: Sequence[Path] = (),
    legacy: LegacyTranslator | None = None,
    partitions: bool = True,
) -> RetentionReport:
    """Delete what is past its window (module docstring). ``default_days``: the window of keys
    and teams with none of their own; ``partitions`` False: row deletes only (what a drop
    saves is measured against it: ``loadtests/bench/retention.py``)."""
    today = (now or datetime.now(UTC)).astimezone(UTC).date()
    windows = await resolve_windows(store, default_days)
    own = sum(1 for k, d in windows.keys.items() if d != default_days)
    summary = {"default": default_days, "shortest": windows.shortest, "keys_own_or_team": own}
    report = RetentionReport(new_id(), today, dry_run, summary)
    parts = await _open_partitions(store)
    try:
        if parts is not None and not await parts.lock():
            report.busy = True
            return report
        if parts is not None and not dry_run:
            report.partitions_made = await parts.ensure(
                today + timedelta(days=n) for n in range(AHEAD_DAYS + 1)
            )
        await _expire(
            store, parts if partitions else None, windows, report, spool_dirs, export_roots, legacy
        )
    finally:
        if parts is not None:
            await parts.close()
    if report.changed and not dry_run:
        await record_change(
            store,
            ChangeRecord(
                id=report.retention_id,
                actor=RETENTION_ACTOR,
                action=RETENTION_ACTION,
                subject=f"today:{today.isoformat()}",
                detail=report.detail(),
            ),
        )
    return report


async def _open_partitions(store: StoreBackend) -> DayPartitions | None:
    s = sql_store(store)
    if s.codec.dialect != "postgres":
        return None
    # Imported here: psycopg is only for stores that are PostgreSQL (traffic.store.backend).
    from traffic.store.partitions import DayPartitions
    from traffic.store.postgres_backend import PostgresBackend

    return await DayPartitions.open(s.dsn) if isinstance(s, PostgresBackend) else None


async def _expire(
    store: StoreBackend,
    parts: DayPartitions | None,
    windows: Windows,
    report: RetentionReport,
    spool_dirs: Sequence[Path],
    export_roots: Sequence[Path],
    legacy: LegacyTranslator | None,
) -> None:
    """Step 3 (module docstring) into ``report``."""
    today = report.today

    def expires(record: InferenceRecord) -> bool:
        return windows.expires(record.api_key_id, id_day(record.id), today)

    days: set[date] = set()
    partitioned: set[date] = set()
    if windows.shortest is not None:
        cutoff = today - timedelta(days=windows.shortest)
        days.update(await _days_with_rows(store, cutoff))
        if parts is not None:
            partitioned = {d for d in await parts.days() if d < cutoff}
            days |= partitioned
    expiring: list[tuple[DayExpiry, list[str]]] = []
    for day in sorted(days):
        rows = await _day_rows(store, day)
        expired = [i for i, key in rows if windows.expires(key, day, today)]
        kept = len(rows) - len(expired)
        expiry = DayExpiry(day, _method(day in partitioned, len(expired), kept), len(expired), kept)
        if expired or expiry.method == "drop":
            report.days.append(expiry)
            expiring.append((expiry, expired))
    # The spool once for every day (and for what expired only there): scanned and rewritten
    # before any day's rows go, so a replay cannot bring an expired record back meanwhile.
    day_ids = {i for _, e in expiring for i in e}
    scope = SpoolScope(inference_ids=set(day_ids), expires=expires)
    ids = await find_in_spool(spool_dirs, scope)
    if report.dry_run:
        only = ids - day_ids
        report.spool.segments = {"inference": len(only)} if only else {}
        return
    if spool_dirs and ids:
        spooled = sorted(ids - day_ids)
        uses = await records_uses(store, spooled)
        _add(report, await erase(store, spooled, scope, uses, spool_dirs=spool_dirs, busy_tries=1))
    for expiry, expired in expiring:
        erased = await erase(
            store,
            expired,
            SpoolScope(inference_ids=set(expired)),
            await records_uses(store, expired),
            export_roots=export_roots,
            legacy=legacy,
            busy_tries=1,
            delete=partial(_store_step, store, parts, windows, today, expiry, sorted(expired)),
        )
        expiry.deleted = erased.database
        _add(report, erased)


async def scheduled_pass(
    store: StoreBackend, config: StoreConfig, legacy: LegacyTranslator | None = None
) -> None:
    """A gateway's scheduled pass (every ``config.retention_interval_s``, by the process that
    holds the fleet's retention lease: ``gateway.background.LeasedLoop``): the store config's
    default window and its spool."""
    report = await retention_pass(
        store, config.retention_days, spool_dirs=[config.spool_dir], legacy=legacy
    )
    if report.changed:
        log.info("retention: %s", report.deleted)
