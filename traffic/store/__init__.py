"""The traffic store: the record of truth the gateway writes, and the RL loop's source of data.

Public surface (see each module's docstring for its contract):

- records: :class:`InferenceRecord`, :class:`FeedbackRecord`, :class:`ShadowRecord`,
  :class:`ModelVersionRecord`, :class:`PolicyVersionRecord`, :class:`ApiKeyRecord`,
  :class:`TeamRecord`, :class:`DatasetRecord` and :class:`ModelDatasetRecord` (lineage: which
  datasets trained which checkpoint; ``traffic.store.versions`` walks the checkpoints'
  parents); read side :class:`InferenceFilter`, :class:`InferenceRow`; the vocabulary
  :data:`FeedbackKind`, :data:`WireFormat`, :data:`TrainingUse` (consent);
- ids: :func:`new_id` (UUIDv7), :func:`id_time`;
- backends: :class:`StoreBackend` (protocol), :class:`SqliteBackend`,
  ``traffic.store.postgres_backend.PostgresBackend`` (imported where a PostgreSQL URL is opened:
  psycopg is heavy to import), :func:`open_store` from a :class:`StoreConfig`;
- writing off the request path: :class:`RecordWriter` and its :class:`WriterStats`;
- errors: :class:`StoreError`, :class:`StoreUnavailable`, :class:`StoreDataError`,
  :class:`StoreConflict`.

This package imports nothing else from the project (nor does ``traffic.export``, its reader).
"""

from traffic.store.backend import StoreBackend, open_store
from traffic.store.config import StoreConfig
from traffic.store.errors import StoreConflict, StoreDataError, StoreError, StoreUnavailable
from traffic.store.ids import id_time, new_id
from traffic.store.records import (
    FEEDBACK_KINDS,
    GROUP_KEYS,
    TRAINING_USES,
    ApiKeyRecord,
    DatasetRecord,
    FeedbackKind,
    FeedbackRecord,
    InferenceFilter,
    InferenceOwner,
    InferenceRecord,
    InferenceRow,
    JsonField,
    JsonText,
    ModelDatasetRecord,
    ModelVersionRecord,
    PolicyVersionRecord,
    ShadowRecord,
    TeamRecord,
    TrainingUse,
    WireFormat,
    json_object,
)
from traffic.store.sqlite_backend import SqliteBackend
from traffic.store.writer import RecordWriter, WriterStats

__all__ = [
    "FEEDBACK_KINDS",
    "GROUP_KEYS",
    "TRAINING_USES",
    "ApiKeyRecord",
    "DatasetRecord",
    "FeedbackKind",
    "FeedbackRecord",
    "InferenceFilter",
    "InferenceOwner",
    "InferenceRecord",
    "InferenceRow",
    "JsonField",
    "JsonText",
    "ModelDatasetRecord",
    "ModelVersionRecord",
    "PolicyVersionRecord",
    "RecordWriter",
    "ShadowRecord",
    "SqliteBackend",
    "StoreBackend",
    "StoreConfig",
    "StoreConflict",
    "StoreDataError",
    "StoreError",
    "StoreUnavailable",
    "TeamRecord",
    "TrainingUse",
    "WireFormat",
    "WriterStats",
    "id_time",
    "json_object",
    "new_id",
    "open_store",
]
