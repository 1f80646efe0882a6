"""The store's operations written once over a few per-dialect primitives.

:class:`SqlStore` implements every method of :class:`traffic.store.backend.StoreBackend` on top of
four primitives that :class:`~traffic.store.sqlite_backend.SqliteBackend` and
:class:`~traffic.store.postgres_backend.PostgresBackend` provide:

- ``_insert(table, records)``: encode and insert, ``ON CONFLICT DO NOTHING``, one transaction;
- ``_fetch(sql, params, write=..., retry=..., lane=...)``: one statement, its rows
  (``RETURNING`` included); ``retry=False`` for statements that must not run twice (adding
  spend); ``lane`` says whose work it is (:data:`Lane`), so a backend can keep the request path
  apart from background writes;
- ``_summarize(where, params, group_by)``: the summary rows (SQL or Python aggregation);
- ``connect``/``close``/``ping``.

Lanes: ``request`` for the reads a client request waits for (a key lookup by hash, the
inference lookup of ``/v1/feedback``), ``background`` for the writes nobody waits for (the
record writer's inserts, the budget flusher's ``add_spend``), ``default`` for the rest (admin API,
CLI, exports, summaries, versions, migrations). PostgreSQL gives each its own connections and the
request lane a short timeout; SQLite has its reader and writer threads already.

Reads page through inferences by primary key (keyset pagination): no cursor or transaction stays
open between pages, so a slow consumer never holds locks or a connection hostage.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any, Literal

from traffic.store.config import DEFAULT_READ_BATCH_SIZE
from traffic.store.ids import is_uuid
from traffic.store.queries import (
    Codec,
    Row,
    check_group_by,
    decode_row,
    encode_rows,
    in_ids,
    in_keys,
    inference_where,
    insert_sql,
    select_list,
    upsert_sql,
)
from traffic.store.records import (
    ApiKeyRecord,
    DatasetRecord,
    FeedbackRecord,
    InferenceFilter,
    InferenceOwner,
    InferenceRecord,
    InferenceRow,
    ModelDatasetRecord,
    ModelVersionRecord,
    PolicyVersionRecord,
    ShadowRecord,
    TeamRecord,
    as_utc,
    utc_now,
)
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
    ColumnType,
    Table,
)

Lane = Literal["request", "background", "default"]


class SqlStore(ABC):
    """A :class:`StoreBackend` over a SQL database; subclasses supply the primitives."""

    codec: Codec

    # -- primitives ------------------------------------------------------------------------
    @abstractmethod
    async def connect(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def ping(self) -> None: ...

    @abstractmethod
    async def _insert(self, table: Table, records: Sequence[object]) -> None: ...

    @abstractmethod
    async def _fetch(
        self,
        sql: str,
        params: Sequence[Any],
        *,
        write: bool = False,
        retry: bool = True,
        lane: Lane = "default",
    ) -> list[Row]: ...

    @abstractmethod
    async def _summarize(
        self, where: str, params: list[Any], group_by: list[str]
    ) -> list[dict[str, Any]]: ...

    # -- traffic ---------------------------------------------------------------------------
    async def insert_inferences(self, records: Sequence[InferenceRecord]) -> None:
        if records:
            await self._insert(INFERENCE, records)

    async def insert_feedback(self, records: Sequence[FeedbackRecord]) -> None:
        if records:
            await self._insert(FEEDBACK, records)

    async def insert_shadows(self, records: Sequence[ShadowRecord]) -> None:
        if records:
            await self._insert(SHADOW, records)

    async def inference_exists(self, inference_id: str) -> bool:
        return await self.inference_owner(inference_id) is not None

    async def inference_owner(self, inference_id: str) -> InferenceOwner | None:
        if not is_uuid(inference_id):
            return None
        p = self.codec.param
        rows = await self._fetch(
            f"SELECT api_key_id FROM inference WHERE id = {p}",
            [self.codec.encode_id(inference_id)],
            lane="request",
        )
        return InferenceOwner(rows[0][0]) if rows else None

    async def iter_inferences(
        self,
        filters: InferenceFilter | None = None,
        batch_size: int = DEFAULT_READ_BATCH_SIZE,
        *,
        with_shadows: bool = False,
    ) -> AsyncIterator[InferenceRow]:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        where, params = inference_where(filters, self.codec)
        p = self.codec.param
        after: str | None = None
        while True:
            page_where, page_params = where, list(params)
            if after is not None:
                page_where += f" AND i.id > {p}"
                page_params.append(after)
            rows = await self._fetch(
                f"SELECT {select_list(INFERENCE, 'i')} FROM inference i WHERE {page_where}"
                f" ORDER BY i.id LIMIT {int(batch_size)}",
                page_params,
            )
            if not rows:
                return
            records = [decode_row(InferenceRecord, INFERENCE, r, self.codec) for r in rows]
            ids = [r.id for r in records]
            feedback = await self._children(FeedbackRecord, FEEDBACK, ids)
            shadows = await self._children(ShadowRecord, SHADOW, ids) if with_shadows else {}
            for record in records:
                yield InferenceRow(record, feedback.get(record.id, []), shadows.get(record.id, []))
            if len(rows) < batch_size:
                return
            after = ids[-1]

    async def set_canonical(
        self,
        inference_id: str,
        request: dict[str, Any] | None,
        response: dict[str, Any] | None,
    ) -> bool:
        """Write the canonical conversation of a record stored without it (a back-fill of rows
        from before migration 3); a row that has one already is left alone. True: written."""
        p = self.codec.param
        rows = await self._fetch(
            f"UPDATE inference SET canonical_request = {p}, canonical_response = {p}"
            f" WHERE id = {p} AND canonical_request IS NULL RETURNING id",
            [
                self.codec.encode(ColumnType.JSON, request),
                self.codec.encode(ColumnType.JSON, response),
                self.codec.encode_id(inference_id),
            ],
            write=True,
        )
        return bool(rows)

    async def _children(self, cls: type[Any], table: Table, ids: list[str]) -> dict[str, list[Any]]:
        condition, params = in_ids("inference_id", ids, self.codec)
        rows = await self._fetch(
            f"SELECT {select_list(table)} FROM {table.name} WHERE {condition} ORDER BY id", params
        )
        by_parent: dict[str, list[Any]] = defaultdict(list)
        for row in rows:
            child = decode_row(cls, table, row, self.codec)
            by_parent[child.inference_id].append(child)
        return by_parent

    async def summarize(
        self, filters: InferenceFilter | None = None, group_by: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        keys = check_group_by(group_by)
        where, params = inference_where(filters, self.codec)
        return await self._summarize(where, params, keys)

    # -- versions --------------------------------------------------------------------------
    async def upsert_model_version(self, record: ModelVersionRecord) -> None:
        await self._upsert(MODEL_VERSION, record)

    async def list_model_versions(self) -> list[ModelVersionRecord]:
        return await self._list(ModelVersionRecord, MODEL_VERSION)

    async def upsert_policy_version(self, record: PolicyVersionRecord) -> None:
        await self._upsert(POLICY_VERSION, record)

    async def list_policy_versions(self) -> list[PolicyVersionRecord]:
        return await self._list(PolicyVersionRecord, POLICY_VERSION)

    # -- lineage: which datasets trained which checkpoint ----------------------------------
    async def link_datasets(
        self, datasets: Sequence[DatasetRecord], links: Sequence[ModelDatasetRecord]
    ) -> None:
        """Store the ``datasets`` not stored yet (an id set can be megabytes: not sent again),
        then ``links``; both insert-if-absent."""
        known = {d.id for d in await self.get_datasets([d.id for d in datasets], lineage=False)}
        missing = [d for d in datasets if d.id not in known]
        if missing:
            await self._insert(DATASET, missing)
        if links:
            await self._insert(MODEL_DATASET, links)

    async def datasets_of(
        self, model_version_ids: Sequence[str]
    ) -> list[tuple[ModelDatasetRecord, DatasetRecord]]:
        """The datasets each of ``model_version_ids`` was trained on, with their links: in the
        order of ``model_version_ids``, then of the datasets' first row ids."""
        if not model_version_ids:
            return []
        where, params = in_keys("model_version_id", model_version_ids, self.codec)
        rows = await self._fetch(
            f"SELECT {select_list(MODEL_DATASET)} FROM model_dataset WHERE {where}", params
        )
        links = [decode_row(ModelDatasetRecord, MODEL_DATASET, r, self.codec) for r in rows]
        by_id = {d.id: d for d in await self.get_datasets(sorted({x.dataset_id for x in links}))}
        order = {v: n for n, v in enumerate(model_version_ids)}
        found = [(x, by_id[x.dataset_id]) for x in links if x.dataset_id in by_id]
        return sorted(found, key=lambda p: (order[p[0].model_version_id], p[1].first_id or ""))

    async def dataset_bounds(self) -> list[tuple[str, str | None, str | None]]:
        """Every dataset's id and the first and last row ids it names (no id sets read)."""
        rows = await self._fetch("SELECT id, first_id, last_id FROM dataset ORDER BY id", [])
        return [(str(r[0]), r[1], r[2]) for r in rows]

    async def get_datasets(
        self, dataset_ids: Sequence[str], *, lineage: bool = True
    ) -> list[DatasetRecord]:
        """The stored datasets among ``dataset_ids``; their ``lineage`` read back as ``{}``
        unless ``lineage`` (the id sets are the bulk of a row)."""
        if not dataset_ids:
            return []
        where, params = in_keys("id", dataset_ids, self.codec)
        columns = select_list(DATASET)
        if not lineage:
            columns = columns.replace("lineage", "'{}' AS lineage")
        rows = await self._fetch(f"SELECT {columns} FROM dataset WHERE {where} ORDER BY id", params)
        return [decode_row(DatasetRecord, DATASET, r, self.codec) for r in rows]

    async def dataset_links(self, dataset_ids: Sequence[str]) -> list[ModelDatasetRecord]:
        """The checkpoints each of ``dataset_ids`` trained."""
        if not dataset_ids:
            return []
        where, params = in_keys("dataset_id", dataset_ids, self.codec)
        rows = await self._fetch(
            f"SELECT {select_list(MODEL_DATASET)} FROM model_dataset WHERE {where}"
            " ORDER BY model_version_id, dataset_id",
            params,
        )
        return [decode_row(ModelDatasetRecord, MODEL_DATASET, r, self.codec) for r in rows]

    async def _upsert(self, table: Table, record: object) -> None:
        (row,) = encode_rows(table, [record], self.codec)
        await self._fetch(upsert_sql(table, self.codec), row, write=True)

    async def _list(self, cls: type[Any], table: Table, where: str = "1 = 1") -> list[Any]:
        rows = await self._fetch(
            f"SELECT {select_list(table)} FROM {table.name} WHERE {where} ORDER BY created_at, id",
            [],
        )
        return [decode_row(cls, table, r, self.codec) for r in rows]

    # -- API keys --------------------------------------------------------------------------
    async def create_api_key(self, record: ApiKeyRecord) -> None:
        """Insert a key; :class:`StoreConflict` when its id or hash exists already."""
        (row,) = encode_rows(API_KEY, [record], self.codec)
        sql = insert_sql(API_KEY, self.codec, on_conflict_ignore=False)
        await self._fetch(sql, row, write=True, retry=False)

    async def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        return await self._one_key("id", key_id, "default")

    async def get_api_key_by_hash(self, key_hash: str) -> ApiKeyRecord | None:
        """The key with this hash: what a request's authentication reads (``request`` lane)."""
        return await self._one_key("key_hash", key_hash, "request")

    async def _one_key(self, column: str, value: str, lane: Lane) -> ApiKeyRecord | None:
        rows = await self._fetch(
            f"SELECT {select_list(API_KEY)} FROM api_key WHERE {column} = {self.codec.param}",
            [self.codec.encode(ColumnType.TEXT, value)],  # as stored (no NUL on PostgreSQL)
            lane=lane,
        )
        return decode_row(ApiKeyRecord, API_KEY, rows[0], self.codec) if rows else None

    async def revoke_api_key(self, key_id: str, at: datetime | None = None) -> bool:
        """Mark a key revoked; False when it is unknown or revoked already."""
        p = self.codec.param
        when = self.codec.encode(ColumnType.TS, as_utc(at, "at") if at else utc_now())
        rows = await self._fetch(
            f"UPDATE api_key SET revoked_at = {p} WHERE id = {p} AND revoked_at IS NULL"
            " RETURNING id",
            [when, self.codec.encode(ColumnType.KEY, key_id)],
            write=True,
        )
        return bool(rows)

    async def add_spend(self, key_id: str, usd: float) -> float | None:
        """Add ``usd`` to a key's spend atomically; the new total, or None for an unknown key."""
        p = self.codec.param
        rows = await self._fetch(
            f"UPDATE api_key SET spent_usd = spent_usd + {p} WHERE id = {p} RETURNING spent_usd",
            [float(usd), self.codec.encode(ColumnType.KEY, key_id)],
            write=True,
            retry=False,
            lane="background",
        )
        return float(rows[0][0]) if rows else None

    async def list_api_keys(self, *, include_revoked: bool = True) -> list[ApiKeyRecord]:
        where = "1 = 1" if include_revoked else "revoked_at IS NULL"
        return await self._list(ApiKeyRecord, API_KEY, where)

    async def set_api_key_consent(
        self, key_id: str, *, team_id: str | None, training_use: str | None
    ) -> bool:
        """Set a key's team and its own consent (None clears either); False for an unknown
        key."""
        p = self.codec.param
        rows = await self._fetch(
            f"UPDATE api_key SET team_id = {p}, training_use = {p} WHERE id = {p} RETURNING id",
            [
                self.codec.encode(ColumnType.KEY, team_id),
                self.codec.encode(ColumnType.TEXT, training_use),
                self.codec.encode(ColumnType.KEY, key_id),
            ],
            write=True,
        )
        return bool(rows)

    # -- teams -----------------------------------------------------------------------------
    async def get_team(self, team_id: str) -> TeamRecord | None:
        """The team ``team_id``; what a key's authentication reads when the key has no consent
        of its own (``request`` lane)."""
        rows = await self._fetch(
            f"SELECT {select_list(TEAM)} FROM team WHERE id = {self.codec.param}",
            [self.codec.encode(ColumnType.KEY, team_id)],
            lane="request",
        )
        return decode_row(TeamRecord, TEAM, rows[0], self.codec) if rows else None

    async def upsert_team(self, record: TeamRecord) -> None:
        await self._upsert(TEAM, record)

    async def list_teams(self) -> list[TeamRecord]:
        return await self._list(TeamRecord, TEAM)

    async def schema_version(self) -> int:
        rows = await self._fetch("SELECT max(version) FROM schema_migrations", [])
        return int(rows[0][0] or 0)
