"""Configuration of the traffic store and its record writer; every default is defined here once.

``url`` picks the backend:

- ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or ``sqlite:///:memory:``
  (embedded default; WAL mode);
- ``postgresql://user@host:port/db?options=...`` (or ``postgres://``), any libpq URL.

The writer settings bound memory (``queue_size``), batch database round trips (``batch_size``,
``flush_interval_s``) and say where records wait while the database is down (``spool_dir``).

Retention (:mod:`traffic.retention`): ``retention_days``, the window of the keys and teams that
set none of their own (:mod:`traffic.store.retention_windows`), and ``retention_interval_s``,
how often the scheduled pass runs (``traffic.retention.scheduled_pass``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_URL: Final = "sqlite:///.cache/switchyard.db"
DEFAULT_SPOOL_DIR: Final = ".cache/spool"
DEFAULT_BATCH_SIZE: Final = 500
DEFAULT_FLUSH_INTERVAL_S: Final = 0.05
# The writer process's batches: records arrive there a frame at a time, each safe in the gateway
# until acknowledged; fewer, larger transactions cost it less (gateway/recording/child.py).
DEFAULT_PROCESS_FLUSH_INTERVAL_S: Final = 0.2
DEFAULT_QUEUE_SIZE: Final = 10_000
# ~10,000 short streamed records or ~650 of 256 tokens (their raw bytes go with them).
DEFAULT_QUEUE_BYTES: Final = 32 * 1024 * 1024
DEFAULT_RETRY_INITIAL_S: Final = 0.5
DEFAULT_RETRY_MAX_S: Final = 30.0
DEFAULT_SEGMENT_BYTES: Final = 8 * 1024 * 1024
DEFAULT_CONNECT_TIMEOUT_S: Final = 5.0
DEFAULT_OPERATION_TIMEOUT_S: Final = 30.0
DEFAULT_REQUEST_TIMEOUT_S: Final = 2.0
DEFAULT_REQUEST_CONNECTIONS: Final = 2
DEFAULT_SQLITE_BUSY_TIMEOUT_S: Final = 5.0
DEFAULT_CLOSE_TIMEOUT_S: Final = 10.0
DEFAULT_READ_BATCH_SIZE: Final = 500
# None: kept forever, what every record was before retention existed.
DEFAULT_RETENTION_DAYS: Final[int | None] = None
# Hourly: a day's expiry is done within the hour after its midnight (UTC).
DEFAULT_RETENTION_INTERVAL_S: Final = 3600.0

Dialect = Literal["sqlite", "postgres"]


class StoreConfig(BaseModel):
    """Where the traffic store lives and how the record writer batches and spools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(default=DEFAULT_URL, description="sqlite:///path or postgresql://...")
    batch_size: int = Field(default=DEFAULT_BATCH_SIZE, ge=1, le=50_000)
    flush_interval_s: float = Field(
        default=DEFAULT_FLUSH_INTERVAL_S, gt=0, description="Longest wait to fill a batch."
    )
    process_flush_interval_s: float = Field(
        default=DEFAULT_PROCESS_FLUSH_INTERVAL_S,
        gt=0,
        description="Longest wait to fill a database batch in the writer process "
        "(store.writer_process), which the gateway hands records every flush_interval_s; they "
        "are safe meanwhile (the gateway keeps each batch until the process stored it).",
    )
    queue_size: int = Field(
        default=DEFAULT_QUEUE_SIZE, ge=1, description="Records held in memory; beyond, spool."
    )
    queue_bytes: int = Field(
        default=DEFAULT_QUEUE_BYTES,
        ge=1,
        description="Bytes of records in flight to the writer process (store.writer_process) "
        "at most, as sent; beyond, the gateway spools them (a record count alone does not bound "
        "memory: a long streamed answer is tens of KB).",
    )
    spool_dir: Path = Field(
        default=Path(DEFAULT_SPOOL_DIR), description="One per process group sharing a database."
    )
    spool_segment_bytes: int = Field(default=DEFAULT_SEGMENT_BYTES, ge=4096)
    retry_initial_s: float = Field(
        default=DEFAULT_RETRY_INITIAL_S, gt=0, description="First back-off of the spool replayer."
    )
    retry_max_s: float = Field(default=DEFAULT_RETRY_MAX_S, gt=0)
    connect_timeout_s: float = Field(default=DEFAULT_CONNECT_TIMEOUT_S, gt=0)
    operation_timeout_s: float = Field(
        default=DEFAULT_OPERATION_TIMEOUT_S,
        gt=0,
        description="PostgreSQL: a statement unanswered this long counts as the server gone.",
    )
    request_timeout_s: float = Field(
        default=DEFAULT_REQUEST_TIMEOUT_S,
        gt=0,
        description="PostgreSQL: the longest a read a client request waits for (a key lookup, "
        "feedback's inference lookup) may take, connection included.",
    )
    request_connections: int = Field(
        default=DEFAULT_REQUEST_CONNECTIONS,
        ge=1,
        description="PostgreSQL: connections kept for those reads, apart from background writes.",
    )
    sqlite_busy_timeout_s: float = Field(default=DEFAULT_SQLITE_BUSY_TIMEOUT_S, ge=0)
    retention_days: int | None = Field(
        default=DEFAULT_RETENTION_DAYS,
        ge=1,
        description="Days a record is kept (whole UTC days after the day it was recorded) "
        "unless its key or team has a window of its own; None: kept forever.",
    )
    retention_interval_s: float = Field(
        default=DEFAULT_RETENTION_INTERVAL_S,
        gt=0,
        description="How often the scheduled retention pass runs (it deletes what is past "
        "its window; on PostgreSQL it also makes the day partitions ahead).",
    )

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        if not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError(
                "store url must start with sqlite:/// (embedded) or postgresql:// (server), "
                f"got {url!r}"
            )
        return url

    @model_validator(mode="after")
    def _backoff_order(self) -> StoreConfig:
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError(
                f"retry_max_s ({self.retry_max_s}) must be >= retry_initial_s "
                f"({self.retry_initial_s}); raise retry_max_s or lower retry_initial_s"
            )
        return self

    @property
    def dialect(self) -> Dialect:
        return "sqlite" if self.url.startswith("sqlite:") else "postgres"

    @property
    def sqlite_path(self) -> str:
        """The file path of a ``sqlite:///`` url (``:memory:`` for an in-memory database)."""
        if self.dialect != "sqlite":
            raise ValueError(f"not a sqlite url: {self.url}")
        return self.url.removeprefix("sqlite:///")
