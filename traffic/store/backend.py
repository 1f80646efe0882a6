"""The traffic store's interface, and :func:`open_store` to get one from a config.

Contract of every :class:`StoreBackend`:

- ``await connect()`` before anything else: it opens the database and applies pending migrations
  (:mod:`traffic.store.migrations`); ``await close()`` at the end.
- Inserts are idempotent by id (``INSERT ... ON CONFLICT DO NOTHING``): replaying a batch, a spool
  segment or a whole file never duplicates a row, and never overwrites one.
- Errors are :class:`~traffic.store.errors.StoreError`: ``StoreUnavailable`` when the database
  cannot be reached now (retry later), ``StoreDataError`` when it refused the input (do not
  retry), ``StoreConflict`` for a duplicate API key.
- No method blocks the event loop: SQLite runs on its own threads, PostgreSQL uses psycopg's
  async API.
- Reads page by primary key; ``iter_inferences`` yields inferences in id (time) order, each with
  its feedback, and its shadow answers when asked.

Two implementations: :class:`~traffic.store.sqlite_backend.SqliteBackend` (embedded default) and
:class:`~traffic.store.postgres_backend.PostgresBackend`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from traffic.store.config import DEFAULT_READ_BATCH_SIZE, StoreConfig
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
)
from traffic.store.sqlite_backend import SqliteBackend


@runtime_checkable
class StoreBackend(Protocol):
    """Where traffic, feedback, versions and API keys are kept."""

    async def connect(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> None:
        """Return when the database answers; ``StoreUnavailable`` otherwise."""

    # Writes of traffic (the record writer's path); idempotent by id.
    async def insert_inferences(self, records: Sequence[InferenceRecord]) -> None: ...
    async def insert_feedback(self, records: Sequence[FeedbackRecord]) -> None: ...
    async def insert_shadows(self, records: Sequence[ShadowRecord]) -> None: ...

    # Reads.
    async def inference_exists(self, inference_id: str) -> bool: ...
    async def inference_owner(self, inference_id: str) -> InferenceOwner | None:
        """Which key made the inference; None when there is no inference with that id."""

    def iter_inferences(
        self,
        filters: InferenceFilter | None = None,
        batch_size: int = DEFAULT_READ_BATCH_SIZE,
        *,
        with_shadows: bool = False,
    ) -> AsyncIterator[InferenceRow]: ...
    async def set_canonical(
        self,
        inference_id: str,
        request: dict[str, Any] | None,
        response: dict[str, Any] | None,
    ) -> bool: ...
    async def summarize(
        self, filters: InferenceFilter | None = None, group_by: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        """Per-group numbers; see :mod:`traffic.store.summary` for their definitions."""
        ...

    # Lineage.
    async def upsert_model_version(self, record: ModelVersionRecord) -> None: ...
    async def list_model_versions(self) -> list[ModelVersionRecord]: ...
    async def upsert_policy_version(self, record: PolicyVersionRecord) -> None: ...
    async def list_policy_versions(self) -> list[PolicyVersionRecord]: ...

    # Which datasets trained which checkpoint (traffic.export.lineage); only ever added to.
    async def link_datasets(
        self, datasets: Sequence[DatasetRecord], links: Sequence[ModelDatasetRecord]
    ) -> None: ...
    async def datasets_of(
        self, model_version_ids: Sequence[str]
    ) -> list[tuple[ModelDatasetRecord, DatasetRecord]]: ...
    async def dataset_bounds(self) -> list[tuple[str, str | None, str | None]]: ...
    async def get_datasets(
        self, dataset_ids: Sequence[str], *, lineage: bool = True
    ) -> list[DatasetRecord]: ...
    async def dataset_links(self, dataset_ids: Sequence[str]) -> list[ModelDatasetRecord]: ...

    # API keys.
    async def create_api_key(self, record: ApiKeyRecord) -> None: ...
    async def get_api_key(self, key_id: str) -> ApiKeyRecord | None: ...
    async def get_api_key_by_hash(self, key_hash: str) -> ApiKeyRecord | None: ...
    async def revoke_api_key(self, key_id: str, at: datetime | None = None) -> bool: ...
    async def add_spend(self, key_id: str, usd: float) -> float | None: ...
    async def list_api_keys(self, *, include_revoked: bool = True) -> list[ApiKeyRecord]: ...
    async def set_api_key_consent(
        self, key_id: str, *, team_id: str | None, training_use: str | None
    ) -> bool: ...

    # Teams (the settings their keys inherit).
    async def get_team(self, team_id: str) -> TeamRecord | None: ...
    async def upsert_team(self, record: TeamRecord) -> None: ...
    async def list_teams(self) -> list[TeamRecord]: ...

    async def schema_version(self) -> int: ...


def open_store(config: StoreConfig, *, yield_every: int = 0) -> StoreBackend:
    """The backend ``config.url`` names, not yet connected: ``await store.connect()`` next.
    ``yield_every``: the record writer process's slices (:mod:`traffic.store.yielding`)."""
    if config.dialect == "sqlite":
        return SqliteBackend(
            config.sqlite_path,
            busy_timeout_s=config.sqlite_busy_timeout_s,
            yield_every=yield_every,
        )
    # Imported here, so gateways that store in SQLite never pay psycopg's import (memory and
    # time: docs/recording.md, "Figures behind traffic/'s choices").
    from traffic.store.postgres_backend import PostgresBackend

    return PostgresBackend(
        config.url,
        connect_timeout_s=config.connect_timeout_s,
        operation_timeout_s=config.operation_timeout_s,
        request_timeout_s=config.request_timeout_s,
        request_connections=config.request_connections,
        yield_every=yield_every,
    )
