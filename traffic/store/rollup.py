"""Hourly roll-ups of the traffic record, so long windows read hundreds of rows, not millions.

A roll-up row (``traffic_hourly``) holds, for one grouping (``dim``), one UTC hour, one group
value and one route target: requests, errors, failovers, cost, accepted / rejected / edited
feedback, and histograms of latency and TTFT. Groupings (:func:`dims`): ``all`` (whole traffic
per route target), ``served_model``, ``endpoint``, ``api_key_id``, ``policy_version``,
``decision``, ``p_local`` and ``tag:<class tag>``, with the definitions of
:mod:`traffic.store.console_queries`. Local share is computed when reading, from the targets.

Histograms: :data:`BUCKETS` buckets; bucket 0 holds values below 1 ms, bucket ``k >= 1`` values
in ``[RATIO**(k-1), RATIO**k)`` ms, the last one everything above. A percentile read from a
histogram interpolates linearly inside its bucket, so it is within one bucket (a factor of
:data:`RATIO`) of the exact figure: the console marks figures of roll-ups as approximate.

Rolling up (:func:`roll_up`, run in the background by the gateway's console): per grouping,
every closed hour from the last rolled one (or from the oldest record) up to the current hour is
computed by ``INSERT ... SELECT ... GROUP BY ... ON CONFLICT DO UPDATE``, a day of hours per
statement (idempotent: any number of gateway processes may do it), then marked rolled. The last
:data:`REROLL_HOURS` closed hours are computed again each time, for feedback and records arriving
late (a spool replayed later than that is not counted in the roll-ups: their windows show it
from the raw record).

Reading (:func:`rolled_breakdown`, :func:`rolled_series`): the hours of the window a grouping has
rolled up come from ``traffic_hourly``; the rest (the window's first partial hour, the hours
after the last rolled one) is computed from the raw record by the same query, and the two are
merged. The answer is the same shape as :func:`traffic.store.console_queries.breakdown`'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from traffic.store.backend import StoreBackend
from traffic.store.console_queries import (
    FEEDBACK_LATERAL,
    OK_SQL,
    SeriesPoint,
    Window,
    check_group,
    group_sql,
    sql_store,
)
from traffic.store.ids import id_time
from traffic.store.queries import Codec, feedback_count
from traffic.store.schema import ColumnType
from traffic.store.sql_store import SqlStore
from traffic.store.summary import LATENCY_QUANTILES, TTFT_QUANTILES, summary_row

RATIO: Final = 1.5
BUCKETS: Final = 34
REROLL_HOURS: Final = 3
CHUNK_HOURS: Final = 24  # hours rolled up by one statement
MARK: Final = '"__rolled__"'  # the value of a grouping's "this hour is rolled up" row
BASE_DIMS: Final = (
    "all",
    "served_model",
    "endpoint",
    "api_key_id",
    "policy_version",
    "decision",
    "p_local",
)
HOUR: Final = timedelta(hours=1)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_COLUMNS: Final = (
    "dim, hour, value, route_target, requests, errors, failovers, cost_usd,"
    " accepted, rejected, edited, latency_hist, ttft_hist"
)
_UPDATES: Final = ", ".join(
    f"{c} = excluded.{c}"
    for c in (
        "requests",
        "errors",
        "failovers",
        "cost_usd",
        "accepted",
        "rejected",
        "edited",
        "latency_hist",
        "ttft_hist",
    )
)


def dims(class_tag: str) -> tuple[str, ...]:
    """The groupings rolled up, the request class's tag included."""
    return (*BASE_DIMS, f"tag:{class_tag}")


def floor_hour(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def ceil_hour(at: datetime) -> datetime:
    floored = floor_hour(at)
    return floored if floored == at else floored + HOUR


def _bucket_sql(column: str, codec: Codec) -> str:
    ln = f"ln({column}) / ln({RATIO})"
    if codec.dialect == "postgres":
        k = f"least({BUCKETS - 1}, 1 + floor({ln})::int)"
    else:
        k = f"min({BUCKETS - 1}, 1 + CAST(floor({ln}) AS INTEGER))"
    return f"CASE WHEN {column} IS NULL THEN NULL WHEN {column} < 1 THEN 0 ELSE {k} END"


def _hourly_select(
    dim: str, since: datetime, until: datetime, codec: Codec
) -> tuple[str, list[Any]]:
    """Roll-up rows of ``dim`` for the inferences of ``[since, until)``."""
    pg = codec.dialect == "postgres"
    value, v_params = ("'all'", []) if dim == "all" else group_sql(check_group(dim), codec)
    if pg and dim == "all":
        value = "'all'::text"  # to_jsonb needs a type
    window = Window(since, until)
    where, w_params = window.where(codec)
    if pg:
        hour = "date_trunc('hour', i.ts AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
        as_json = f"coalesce(to_jsonb({value})::text, 'null')"
        failover = "jsonb_array_length(i.attempts) > 1"
        counts = "fb.accepted AS acc, fb.rejected AS rej, fb.edited AS edit"
        source = f"inference i {FEEDBACK_LATERAL}"
    else:
        hour = "(i.ts / 3600000000) * 3600000000"
        as_json = f"json_quote({value})"
        failover = "json_array_length(i.attempts) > 1"
        counts = (
            f"{feedback_count('accepted')} AS acc, {feedback_count('rejected')} AS rej,"
            f" {feedback_count('edited')} AS edit"
        )
        source = "inference i"
    inner = (
        f"SELECT {hour} AS hour, {as_json} AS value, i.route_target,"
        f" CASE WHEN {OK_SQL} THEN 0 ELSE 1 END AS error,"
        f" CASE WHEN {failover} THEN 1 ELSE 0 END AS failover, i.cost_usd, {counts},"
        f" {_bucket_sql('i.latency_ms', codec)} AS lb, {_bucket_sql('i.ttft_ms', codec)} AS tb"
        f" FROM {source} WHERE {where}"
    )
    if pg:
        lat = ", ".join(f"count(*) FILTER (WHERE r.lb = {k})" for k in range(BUCKETS))
        ttft = ", ".join(f"count(*) FILTER (WHERE r.tb = {k})" for k in range(BUCKETS))
        hists = f"jsonb_build_array({lat}), jsonb_build_array({ttft})"
    else:
        lat = ", ".join(f"coalesce(sum(r.lb = {k}), 0)" for k in range(BUCKETS))
        ttft = ", ".join(f"coalesce(sum(r.tb = {k}), 0)" for k in range(BUCKETS))
        hists = f"json_array({lat}), json_array({ttft})"
    sql = (
        f"SELECT {codec.param}, r.hour, r.value, r.route_target, count(*),"
        " sum(r.error), sum(r.failover), coalesce(sum(r.cost_usd), 0), sum(r.acc), sum(r.rej),"
        f" sum(r.edit), {hists} FROM ({inner}) r GROUP BY r.hour, r.value, r.route_target"
    )
    return sql, [dim, *v_params, *w_params]


async def _coverage(s: SqlStore, dim: str) -> tuple[datetime, datetime] | None:
    """The first and the last hour ``dim`` has rolled up (contiguous: see the module doc)."""
    p = s.codec.param
    rows = await s._fetch(
        f"SELECT min(hour), max(hour) FROM traffic_hourly WHERE dim = {p} AND value = {p}",
        [dim, MARK],
    )
    first, last = rows[0]
    if first is None:
        return None
    return s.codec.decode(ColumnType.TS, first), s.codec.decode(ColumnType.TS, last)


async def _oldest(s: SqlStore) -> datetime | None:
    """The time of the oldest record (from the primary key: ids carry their time)."""
    rows = await s._fetch("SELECT id FROM inference ORDER BY id LIMIT 1", [])
    return id_time(str(rows[0][0])) if rows else None


async def roll_up(
    store: StoreBackend,
    groupings: Sequence[str],
    now: datetime,
    *,
    reroll_hours: int = REROLL_HOURS,
) -> dict[str, int]:
    """Roll up every closed hour not yet rolled (and the last ``reroll_hours`` again) for each
    grouping; returns the hours computed per grouping."""
    s = sql_store(store)
    codec = s.codec
    end = floor_hour(now)
    oldest = await _oldest(s)
    done: dict[str, int] = {}
    for dim in groupings:
        check_group(dim)
        covered = await _coverage(s, dim)
        if covered is not None:
            start = min(covered[1] + HOUR, end - reroll_hours * HOUR)
        elif oldest is not None:
            start = floor_hour(oldest)
        else:
            done[dim] = 0
            continue
        start = max(start, floor_hour(oldest) if oldest else start)
        if start >= end:
            done[dim] = 0
            continue
        hours = 0
        while start < end:  # a day at a time: SQLite's write lock is never held long
            stop = min(end, start + CHUNK_HOURS * HOUR)
            select, params = _hourly_select(dim, start, stop, codec)
            await s._fetch(
                f"INSERT INTO traffic_hourly ({_COLUMNS}) {select}"
                f" ON CONFLICT (dim, hour, value, route_target) DO UPDATE SET {_UPDATES}",
                params,
                write=True,
            )
            await _mark(s, dim, start, int((stop - start) / HOUR))
            hours += int((stop - start) / HOUR)
            start = stop
        done[dim] = hours
    return done


async def _mark(s: SqlStore, dim: str, start: datetime, hours: int) -> None:
    codec = s.codec
    p = codec.param
    empty = json.dumps([0] * BUCKETS)
    row = f"({p}, {p}, {p}, '', 0, 0, 0, 0, 0, 0, 0, {p}, {p})"
    params: list[Any] = []
    for n in range(hours):
        hour = codec.encode(ColumnType.TS, start + n * HOUR)
        params += [dim, hour, MARK, empty, empty]
    for first in range(0, hours, 500):
        chunk = params[first * 5 : (first + 500) * 5]
        values = ", ".join(row for _ in range(len(chunk) // 5))
        await s._fetch(
            f"INSERT INTO traffic_hourly ({_COLUMNS}) VALUES {values}"
            " ON CONFLICT (dim, hour, value, route_target) DO NOTHING",
            chunk,
            write=True,
        )


@dataclass(slots=True)
class _Group:
    requests: int = 0
    errors: int = 0
    failovers: int = 0
    local: int = 0
    cost_usd: float = 0.0
    accepted: int = 0
    rejected: int = 0
    edited: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    ttft: list[int] = field(default_factory=lambda: [0] * BUCKETS)


def hist_percentile(counts: Sequence[int], q: float) -> float | None:
    """Percentile ``q`` of a histogram, interpolated linearly inside its bucket."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * (total - 1)
    seen = 0
    for k, n in enumerate(counts):
        if n and seen + n > rank:
            lo = 0.0 if k == 0 else RATIO ** (k - 1)
            hi = 1.0 if k == 0 else RATIO**k
            return lo + (hi - lo) * ((rank - seen + 0.5) / n)
        seen += n
    return RATIO ** (len(counts) - 1)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def _rows(
    s: SqlStore, dim: str, window: Window
) -> list[tuple[Any, str, datetime | int, Sequence[Any]]]:
    """(value, route_target, hour, figures) of ``dim`` over ``window``: roll-ups where rolled,
    raw otherwise."""
    codec = s.codec
    p = codec.param
    covered = await _coverage(s, dim)
    first, last = ceil_hour(window.since), floor_hour(window.until)
    parts: list[tuple[datetime, datetime]] = []  # raw ranges
    out: list[tuple[Any, str, datetime | int, Sequence[Any]]] = []
    if covered is not None and first < last:
        lo, hi = max(first, covered[0]), min(last, covered[1] + HOUR)
        if lo < hi:
            rows = await s._fetch(
                f"SELECT value, route_target, hour, requests, errors, failovers, cost_usd,"
                f" accepted, rejected, edited, latency_hist, ttft_hist FROM traffic_hourly"
                f" WHERE dim = {p} AND hour >= {p} AND hour < {p} AND value <> {p}",
                [dim, codec.encode(ColumnType.TS, lo), codec.encode(ColumnType.TS, hi), MARK],
            )
            out += [(r[0], r[1], r[2], r[3:]) for r in rows]
            parts = [(window.since, lo), (hi, window.until)]
    if not parts:
        parts = [(window.since, window.until)]
    for since, until in parts:
        if since >= until:
            continue
        select, params = _hourly_select(dim, since, until, codec)
        rows = await s._fetch(select, params)
        out += [(r[2], r[3], r[1], r[4:]) for r in rows]
    return out


def _fold(
    rows: Sequence[tuple[Any, str, Any, Sequence[Any]]], key_of: Any, local: set[str]
) -> dict[Any, _Group]:
    groups: dict[Any, _Group] = {}
    for value, target, hour, figures in rows:
        key = key_of(_json(value), target, hour)
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Group()
        n, errors, failovers, cost, acc, rej, edit, lat, ttft = figures
        g.requests += int(n)
        g.errors += int(errors or 0)
        g.failovers += int(failovers or 0)
        g.local += int(n) if target in local else 0
        g.cost_usd += float(cost or 0.0)
        g.accepted += int(acc or 0)
        g.rejected += int(rej or 0)
        g.edited += int(edit or 0)
        g.latency = [a + int(b) for a, b in zip(g.latency, _json(lat), strict=True)]
        g.ttft = [a + int(b) for a, b in zip(g.ttft, _json(ttft), strict=True)]
    return groups


async def rolled_breakdown(
    store: StoreBackend, window: Window, group: str, local_targets: Sequence[str]
) -> list[dict[str, Any]]:
    """:func:`~traffic.store.console_queries.breakdown` from the roll-ups (percentiles within a
    bucket of the exact ones; ``approximate`` is set on every row)."""
    s = sql_store(store)
    check_group(group)
    dim = "all" if group == "route_target" else group
    rows = await _rows(s, dim, window)
    if group == "route_target":
        groups = _fold(rows, lambda value, target, hour: target, set(local_targets))
    else:
        groups = _fold(rows, lambda value, target, hour: value, set(local_targets))
    out = []
    for key, g in groups.items():
        row = summary_row(
            {"group": key},
            count=g.requests,
            errors=g.errors,
            cost_usd=g.cost_usd,
            latency=[hist_percentile(g.latency, q) for q in LATENCY_QUANTILES],
            ttft=[hist_percentile(g.ttft, q) for q in TTFT_QUANTILES],
            accepted=g.accepted,
            rejected=g.rejected,
            edited=g.edited,
        )
        out.append({**row, "failovers": g.failovers, "local": g.local, "approximate": True})
    return sorted(out, key=lambda r: (-r["count"], str(r["group"])))


def _epoch_s(hour: Any) -> float:
    if isinstance(hour, datetime):
        return hour.timestamp()
    return float(hour) / 1e6  # SQLite: microseconds


async def rolled_series(store: StoreBackend, window: Window, bucket_s: int) -> list[SeriesPoint]:
    """:func:`~traffic.store.console_queries.series` from the roll-ups, ``bucket_s`` a whole
    number of hours."""
    if bucket_s < 3600 or bucket_s % 3600:
        raise ValueError(f"roll-up series need whole hours, got {bucket_s} s")
    s = sql_store(store)
    rows = await _rows(s, "all", window)

    def key(value: Any, target: str, hour: Any) -> tuple[float, str]:
        start = _epoch_s(hour)
        return (math.floor(start / bucket_s) * bucket_s, target)

    groups = _fold(rows, key, set())
    return [
        SeriesPoint(bucket, target, g.requests, g.errors, g.cost_usd)
        for (bucket, target), g in sorted(groups.items())
    ]
