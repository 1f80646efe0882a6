"""The reads (and the one write) of the ops console, answered by indexes and aggregate queries.

Every traffic read takes a :class:`Window` ``[since, until)``: ids are UUIDv7, so a window is a
primary-key range and a filter on an indexed column plus a window is one index range scan
(:mod:`traffic.store.schema`). Nothing here reads more rows than its window holds, and the lists
are pages (newest first, keyset on the id).

- :func:`breakdown`: per group, the figures of :mod:`traffic.store.summary` (count, errors, cost,
  latency and TTFT percentiles, feedback counts, acceptance rate) plus ``local`` (requests served
  by one of the given local targets) and ``failovers`` (requests that took more than one provider
  call: a retry on the next target of the chain). Groups: :data:`COLUMN_GROUPS`, ``decision``
  (the policy reason's first word: ``rule:<name>``, ``alias:<model>``, ``default``,
  ``learned:local`` / ``learned:explore`` / ``learned:frontier``), ``p_local`` (the learned
  scorer's estimate in the reason, by tenths: the scorer bucket) and ``tag:<name>`` (a tag's
  value, the request class); ``all`` is the whole window as one group. PostgreSQL aggregates
  in SQL; SQLite streams narrow rows into Python, as :mod:`traffic.store.summary` does.
- :func:`series`: per time bucket and route target, requests, errors and cost.
- :func:`search`, :func:`episode`, :func:`exchange`: the record, by filter and text, one episode,
  one exchange with its feedback and shadow answers.
- :func:`recent_ok`: the newest successful exchanges of a window (with feedback and shadows), what
  a routing policy is replayed on.
- :func:`record_change`, :func:`changes`: the change log (who changed what, when).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from traffic.store.backend import StoreBackend
from traffic.store.errors import StoreError
from traffic.store.ids import is_uuid, min_id_at
from traffic.store.queries import (
    Codec,
    Row,
    decode_row,
    feedback_count,
    in_ids,
    inference_where,
    select_list,
)
from traffic.store.records import (
    ChangeRecord,
    FeedbackRecord,
    InferenceFilter,
    InferenceRecord,
    InferenceRow,
    ReleaseRecord,
    ShadowRecord,
)
from traffic.store.schema import CHANGE_LOG, FEEDBACK, INFERENCE, ROUTING_RELEASE, SHADOW
from traffic.store.sql_store import SqlStore
from traffic.store.summary import SummaryAccumulator, summary_row

COLUMN_GROUPS: Final = ("route_target", "served_model", "endpoint", "api_key_id", "policy_version")
GROUPS: Final = (*COLUMN_GROUPS, "decision", "p_local", "all")
TAG_GROUP_PREFIX: Final = "tag:"
OK_SQL: Final = "(i.status < 400 AND i.error IS NULL)"
# PostgreSQL: the feedback counts of inference ``i``, one index probe per inference. A join
# with the window's feedback aggregated first would be cheaper with good estimates, but the
# planner cannot estimate a uuid range narrower than a histogram bucket (no scalar
# interpolation for uuid: it says 1 row) and then loops over the whole aggregate per row.
FEEDBACK_LATERAL: Final = (
    "LEFT JOIN LATERAL (SELECT count(*) FILTER (WHERE f.kind = 'accepted') AS accepted,"
    " count(*) FILTER (WHERE f.kind = 'rejected') AS rejected,"
    " count(*) FILTER (WHERE f.kind = 'edited') AS edited"
    " FROM feedback f WHERE f.inference_id = i.id) fb ON true"
)
_HIT_COLUMNS: Final = (
    "id",
    "ts",
    "api_key_id",
    "episode_id",
    "endpoint",
    "route_target",
    "served_model",
    "weights_version",
    "policy_reason",
    "status",
    "error",
    "latency_ms",
    "ttft_ms",
    "cost_usd",
)


@dataclass(frozen=True, slots=True)
class Window:
    """``since <= time < until`` (both timezone-aware)."""

    since: datetime
    until: datetime

    def where(self, codec: Codec, column: str = "i.id") -> tuple[str, list[Any]]:
        """The window as a range of ``column``, a UUIDv7 id (an inference's, or the
        ``inference_id`` a child row points at)."""
        p = codec.param
        return (
            f"{column} >= {p} AND {column} < {p}",
            [min_id_at(self.since), min_id_at(self.until)],
        )


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    bucket_start: float  # unix seconds
    route_target: str
    requests: int
    errors: int
    cost_usd: float


@dataclass(frozen=True, slots=True)
class TrafficHit:
    """One exchange as a line of a list: what it was, where it went, how it went."""

    id: str
    ts: datetime
    api_key_id: str | None
    episode_id: str | None
    endpoint: str
    route_target: str
    served_model: str
    weights_version: str | None
    policy_reason: str | None
    status: int
    error: str | None
    latency_ms: float
    ttft_ms: float | None
    cost_usd: float | None
    feedback: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status < 400 and self.error is None


@dataclass(frozen=True, slots=True)
class HitPage:
    hits: list[TrafficHit]
    next_before: str | None  # the cursor of the next (older) page; None on the last one


def sql_store(store: StoreBackend) -> SqlStore:
    """The store as the SQL store every backend is (the console reads SQL); a view of one (the
    RL loop's row-mapping views) answers with the store under it (``base_store``)."""
    store = getattr(store, "base_store", store)
    if not isinstance(store, SqlStore):
        raise StoreError(f"the console reads a SQL store, not {type(store).__name__}")
    return store


def check_group(group: str) -> str:
    if group in GROUPS or (group.startswith(TAG_GROUP_PREFIX) and len(group) > len("tag:")):
        return group
    raise ValueError(f"group must be one of {GROUPS} or tag:<name>, got {group!r}")


def group_sql(group: str, codec: Codec) -> tuple[str, list[Any]]:
    """The SQL expression (on ``inference i``) of a checked group, and its parameters."""
    pg = codec.dialect == "postgres"
    if group in COLUMN_GROUPS:
        return f"i.{group}", []
    if group == "all":
        return "'all'", []
    if group == "decision":
        if pg:
            return "split_part(coalesce(i.policy_reason, ''), ' ', 1)", []
        reason = "coalesce(i.policy_reason, '')"
        return f"substr({reason}, 1, instr({reason} || ' ', ' ') - 1)", []
    if group == "p_local":
        # The typed score (migration 6); older rows: the score their reason text names.
        if pg:
            legacy = "substring(i.policy_reason from 'p_local=([0-9.]+)')::float8"
            return f"floor(coalesce(i.decision_p_local, {legacy}) * 10) / 10", []
        at = "instr(i.policy_reason, 'p_local=') + 8"
        legacy = (
            f"CASE WHEN instr(i.policy_reason, 'p_local=') > 0"
            f" AND substr(i.policy_reason, {at}, 1) BETWEEN '0' AND '9'"
            f" THEN CAST(substr(i.policy_reason, {at}, 5) AS REAL) END"
        )
        return (
            f"CAST(coalesce(i.decision_p_local, {legacy}) * 10 AS INTEGER) / 10.0",
            [],
        )
    name = group.removeprefix(TAG_GROUP_PREFIX)
    if pg:
        return "i.tags ->> %s", [name]
    return "json_extract(i.tags, ?)", ['$."' + name.replace('"', '""') + '"']


def in_targets(targets: Sequence[str], codec: Codec) -> tuple[str, list[Any]]:
    """``i.route_target`` is one of ``targets``."""
    if not targets:
        return "false" if codec.dialect == "postgres" else "0", []
    if codec.dialect == "postgres":
        return "i.route_target = ANY(%s)", [list(targets)]
    return f"i.route_target IN ({', '.join('?' for _ in targets)})", list(targets)


async def breakdown(
    store: StoreBackend, window: Window, group: str, local_targets: Sequence[str]
) -> list[dict[str, Any]]:
    """Per value of ``group`` in ``window``: the summary figures plus ``local`` and
    ``failovers`` (module docstring); sorted by requests, most first."""
    s = sql_store(store)
    codec = s.codec
    g_sql, g_params = group_sql(check_group(group), codec)
    where, w_params = window.where(codec)
    local_sql, local_params = in_targets(local_targets, codec)
    if codec.dialect == "postgres":
        sql = (
            f"SELECT {g_sql}, count(*)::bigint,"
            f" (count(*) FILTER (WHERE NOT {OK_SQL}))::bigint,"
            " (count(*) FILTER (WHERE jsonb_array_length(i.attempts) > 1))::bigint,"
            f" (count(*) FILTER (WHERE {local_sql}))::bigint,"
            " coalesce(sum(i.cost_usd), 0)::float8,"
            " percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY i.latency_ms),"
            " percentile_cont(ARRAY[0.5, 0.9]) WITHIN GROUP (ORDER BY i.ttft_ms),"
            " coalesce(sum(fb.accepted), 0)::bigint, coalesce(sum(fb.rejected), 0)::bigint,"
            " coalesce(sum(fb.edited), 0)::bigint"
            f" FROM inference i {FEEDBACK_LATERAL} WHERE {where} GROUP BY 1"
        )
        rows = await s._fetch(sql, [*g_params, *local_params, *w_params])
        out = []
        for key, n, errors, failovers, local, cost, lat, ttft, acc, rej, edit in rows:
            row = summary_row(
                {"group": key},
                count=n,
                errors=errors,
                cost_usd=cost,
                latency=lat,
                ttft=ttft,
                accepted=acc,
                rejected=rej,
                edited=edit,
            )
            out.append({**row, "failovers": failovers, "local": local})
        return _ordered(out)
    # SQLite: the summary's own accumulator over narrow rows, then the two extra counts.
    acc = SummaryAccumulator(["group"])
    cursor_sql = (
        f"SELECT {g_sql}, {OK_SQL}, i.cost_usd, i.latency_ms, i.ttft_ms,"
        f" {feedback_count('accepted')}, {feedback_count('rejected')},"
        f" {feedback_count('edited')} FROM inference i WHERE {where}"
    )
    acc.add_rows(await s._fetch(cursor_sql, [*g_params, *w_params]))
    extra = await s._fetch(
        f"SELECT {g_sql}, sum(json_array_length(i.attempts) > 1), sum({local_sql})"
        f" FROM inference i WHERE {where} GROUP BY 1",
        [*g_params, *local_params, *w_params],
    )
    counts = {key: (int(f or 0), int(n or 0)) for key, f, n in extra}
    return _ordered(
        [
            {**row, "failovers": counts[row["group"]][0], "local": counts[row["group"]][1]}
            for row in acc.rows()
        ]
    )


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (-r["count"], str(r["group"])))


async def series(store: StoreBackend, window: Window, bucket_s: int) -> list[SeriesPoint]:
    """Requests, errors and cost per ``bucket_s`` seconds and route target, oldest first."""
    if bucket_s < 1:
        raise ValueError(f"bucket_s must be >= 1, got {bucket_s}")
    s = sql_store(store)
    where, params = window.where(s.codec)
    if s.codec.dialect == "postgres":
        bucket = "floor(extract(epoch from i.ts) / %s)::bigint"
        errors = f"count(*) FILTER (WHERE NOT {OK_SQL})"
    else:
        bucket = "(i.ts / 1000000) / ?"
        errors = f"sum(CASE WHEN {OK_SQL} THEN 0 ELSE 1 END)"
    rows = await s._fetch(
        f"SELECT {bucket}, i.route_target, count(*), {errors}, coalesce(sum(i.cost_usd), 0)"
        f" FROM inference i WHERE {where} GROUP BY 1, 2 ORDER BY 1, 2",
        [int(bucket_s), *params],
    )
    return [
        SeriesPoint(float(b) * bucket_s, target, int(n), int(e or 0), float(c))
        for b, target, n, e, c in rows
    ]


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def search(
    store: StoreBackend,
    filters: InferenceFilter,
    *,
    text: str | None = None,
    before: str | None = None,
    limit: int = 50,
) -> HitPage:
    """Exchanges matching ``filters`` (and ``text`` in the request or the answer, case
    insensitive), newest first, ``limit`` per page; ``before`` is the previous page's cursor."""
    s = sql_store(store)
    codec = s.codec
    p = codec.param
    where, params = inference_where(filters, codec)
    if before is not None:
        if not is_uuid(before):
            raise ValueError(f"not a page cursor: {before!r}")
        where += f" AND i.id < {p}"
        params.append(codec.encode_id(before))
    if text:
        pattern = f"%{_escape_like(text)}%"
        if codec.dialect == "postgres":
            where += " AND (i.request::text ILIKE %s OR i.response::text ILIKE %s)"
        else:
            where += " AND (i.request LIKE ? ESCAPE '\\' OR i.response LIKE ? ESCAPE '\\')"
        params.extend((pattern, pattern))
    rows = await s._fetch(
        f"SELECT {', '.join('i.' + c for c in _HIT_COLUMNS)} FROM inference i WHERE {where}"
        f" ORDER BY i.id DESC LIMIT {int(limit) + 1}",
        params,
    )
    hits = await _hits(s, rows[:limit])
    return HitPage(hits, hits[-1].id if len(rows) > limit and hits else None)


async def episode(store: StoreBackend, episode_id: str, limit: int = 500) -> list[TrafficHit]:
    """The exchanges of one episode (session), oldest first, at most ``limit``."""
    s = sql_store(store)
    rows = await s._fetch(
        f"SELECT {', '.join('i.' + c for c in _HIT_COLUMNS)} FROM inference i"
        f" WHERE i.episode_id = {s.codec.param} ORDER BY i.id LIMIT {int(limit)}",
        [episode_id],
    )
    return await _hits(s, rows)


async def _hits(s: SqlStore, rows: list[Row]) -> list[TrafficHit]:
    codec = s.codec
    types = [INFERENCE.column(c).type for c in _HIT_COLUMNS]
    decoded = [
        {c: codec.decode(t, v) for c, t, v in zip(_HIT_COLUMNS, types, row, strict=True)}
        for row in rows
    ]
    kinds: dict[str, list[str]] = {}
    if decoded:
        condition, params = in_ids("inference_id", [d["id"] for d in decoded], codec)
        for inference_id, kind in await s._fetch(
            f"SELECT inference_id, kind FROM feedback WHERE {condition} ORDER BY id", params
        ):
            kinds.setdefault(str(inference_id), []).append(kind)
    return [TrafficHit(**d, feedback=tuple(kinds.get(d["id"], ()))) for d in decoded]


async def exchange(store: StoreBackend, inference_id: str) -> InferenceRow | None:
    """One exchange with its feedback and shadow answers; None when there is no such id."""
    if not is_uuid(inference_id):
        return None
    s = sql_store(store)
    rows = await s._fetch(
        f"SELECT {select_list(INFERENCE, 'i')} FROM inference i WHERE i.id = {s.codec.param}",
        [s.codec.encode_id(inference_id)],
    )
    found = await _rows(s, rows)
    return found[0] if found else None


async def recent_ok(store: StoreBackend, window: Window, limit: int) -> list[InferenceRow]:
    """The newest ``limit`` successful exchanges of ``window`` with feedback and shadows,
    oldest first."""
    s = sql_store(store)
    where, params = window.where(s.codec)
    rows = await s._fetch(
        f"SELECT {select_list(INFERENCE, 'i')} FROM inference i WHERE {where} AND {OK_SQL}"
        f" ORDER BY i.id DESC LIMIT {int(limit)}",
        params,
    )
    return list(reversed(await _rows(s, rows)))


async def _rows(s: SqlStore, rows: list[Row]) -> list[InferenceRow]:
    records = [decode_row(InferenceRecord, INFERENCE, r, s.codec) for r in rows]
    if not records:
        return []
    ids = [r.id for r in records]
    feedback = await s._children(FeedbackRecord, FEEDBACK, ids)
    shadows = await s._children(ShadowRecord, SHADOW, ids)
    return [InferenceRow(r, feedback.get(r.id, []), shadows.get(r.id, [])) for r in records]


async def upsert_release(store: StoreBackend, record: ReleaseRecord) -> None:
    """Insert or replace one release (its id is the candidate's policy version)."""
    await sql_store(store)._upsert(ROUTING_RELEASE, record)


async def release(store: StoreBackend, release_id: str) -> ReleaseRecord | None:
    """One release by id (None: not recorded)."""
    s = sql_store(store)
    rows = await s._fetch(
        f"SELECT {select_list(ROUTING_RELEASE)} FROM routing_release WHERE id = {s.codec.param}",
        [release_id],
    )
    return decode_row(ReleaseRecord, ROUTING_RELEASE, rows[0], s.codec) if rows else None


async def releases(store: StoreBackend, *, limit: int = 20) -> list[ReleaseRecord]:
    """The newest releases first."""
    s = sql_store(store)
    rows = await s._fetch(
        f"SELECT {select_list(ROUTING_RELEASE)} FROM routing_release"
        f" ORDER BY created_at DESC, id DESC LIMIT {int(limit)}",
        [],
    )
    return [decode_row(ReleaseRecord, ROUTING_RELEASE, r, s.codec) for r in rows]


async def record_change(store: StoreBackend, record: ChangeRecord) -> None:
    """Append one change to the change log."""
    await sql_store(store)._insert(CHANGE_LOG, [record])


async def changes(
    store: StoreBackend, *, action_prefix: str | None = None, limit: int = 50
) -> list[ChangeRecord]:
    """The newest changes first, optionally only actions starting with ``action_prefix``."""
    s = sql_store(store)
    where, params = "1 = 1", []
    if action_prefix:
        where = f"action LIKE {s.codec.param} ESCAPE '\\'"
        params.append(_escape_like(action_prefix) + "%")
    rows = await s._fetch(
        f"SELECT {select_list(CHANGE_LOG)} FROM change_log WHERE {where}"
        f" ORDER BY id DESC LIMIT {int(limit)}",
        params,
    )
    return [decode_row(ChangeRecord, CHANGE_LOG, r, s.codec) for r in rows]
