"""The traffic store: the gateway's record of truth, and the flywheel's source of data.

Public surface (see each module's docstring for its contract):

- records: :class:`InferenceRecord`, :class:`FeedbackRecord`, :class:`ShadowRecord`,
  :class:`ModelVersionRecord`, :class:`PolicyVersionRecord`, :class:`ApiKeyRecord`;
  read side :class:`InferenceFilter`, :class:`InferenceRow`;
- ids: :func:`new_id` (UUIDv7), :func:`id_time`;
- backends: :class:`StoreBackend` (protocol), :class:`SqliteBackend`, :class:`PostgresBackend`,
  :func:`open_store` from a :class:`StoreConfig`;
- writing off the request path: :class:`RecordWriter` and its :class:`WriterStats`;
- errors: :class:`StoreError`, :class:`StoreUnavailable`, :class:`StoreDataError`,
  :class:`StoreConflict`.

This package imports nothing else from the project.
"""

from gateway.store.backend import StoreBackend, open_store
from gateway.store.config import StoreConfig
from gateway.store.errors import StoreConflict, StoreDataError, StoreError, StoreUnavailable
from gateway.store.ids import id_time, new_id
from gateway.store.postgres_backend import PostgresBackend
from gateway.store.records import (
    FEEDBACK_KINDS,
    GROUP_KEYS,
    ApiKeyRecord,
    FeedbackKind,
    FeedbackRecord,
    InferenceFilter,
    InferenceOwner,
    InferenceRecord,
    InferenceRow,
    ModelVersionRecord,
    PolicyVersionRecord,
    ShadowRecord,
)
from gateway.store.sqlite_backend import SqliteBackend
from gateway.store.writer import RecordWriter, WriterStats

__all__ = [
    "FEEDBACK_KINDS",
    "GROUP_KEYS",
    "ApiKeyRecord",
    "FeedbackKind",
    "FeedbackRecord",
    "InferenceFilter",
    "InferenceOwner",
    "InferenceRecord",
    "InferenceRow",
    "ModelVersionRecord",
    "PolicyVersionRecord",
    "PostgresBackend",
    "RecordWriter",
    "ShadowRecord",
    "SqliteBackend",
    "StoreBackend",
    "StoreConfig",
    "StoreConflict",
    "StoreDataError",
    "StoreError",
    "StoreUnavailable",
    "WriterStats",
    "id_time",
    "new_id",
    "open_store",
]
